#include "models/packed_rows.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

namespace ps::models {

PackedRows MakePackedRows(const Packing& packing, const at::Tensor& idx, int64_t sliding_window) {
  PackedRows rows;
  for (const at::Tensor* t : {&packing.position_ids, &packing.segment_ids}) {
    TORCH_CHECK(!t->defined() || (t->sizes() == idx.sizes() && t->scalar_type() == at::kLong),
                "packed rows: position_ids and segment_ids must be int64 of the input ids' shape ", idx.sizes(),
                ", got ", t->sizes(), " ", t->scalar_type());
  }
  rows.position_ids = packing.position_ids;
  const int64_t T = idx.size(1);
  const bool band = sliding_window > 0 && T > sliding_window;
  if (!packing.segment_ids.defined() && !band) return rows;
  const at::TensorOptions on = idx.options().dtype(at::kLong);
  const at::Tensor i = at::arange(T, on).unsqueeze(1);  // queries [T, 1]
  const at::Tensor j = at::arange(T, on).unsqueeze(0);  // keys [1, T]
  at::Tensor allowed = j <= i;                          // [T, T]
  if (band) allowed = allowed.logical_and(j > i - sliding_window);
  if (!packing.segment_ids.defined()) {
    rows.attn_mask = allowed.view({1, 1, T, T});
    return rows;
  }
  const at::Tensor& seg = packing.segment_ids;  // [B, T]
  const at::Tensor same = seg.unsqueeze(2).eq(seg.unsqueeze(1));  // [B, T, T]
  rows.attn_mask = same.logical_and(allowed).unsqueeze(1);        // [B, 1, T, T]
  return rows;
}

}  // namespace ps::models
