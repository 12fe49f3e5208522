// CPU Adam kernels: element conversions against c10's, every variant bitwise against the
// scalar reference, and against torch::optim::AdamW / Adam over three steps, for sizes
// {0, 1, 7, 15, 16, 17, 1000003}, each gradient dtype, loss scale and weight decay on and
// off; the parallel driver; the sum-of-squares overflow check.
//
// Stated tolerances against LibTorch (the kernels fuse multiply-adds and multiply by
// 1/sqrt(bias_correction2) where LibTorch divides): parameter |d| <= 1e-6 * |p| + 1e-9,
// m |d| <= 1e-6 * max|m| (m cancels towards 0 across steps, so its error scales with
// the operands, not the result), v |d| <= 1e-5 * |v| + 1e-15.
#include <ATen/ATen.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "optim/block_quant.h"
#include "optim/cpu_adam.h"
#include "optim/cpu_adam_element.h"
#include "tests/catch.h"

namespace ps::optim {
namespace {

std::vector<CpuIsa> AvailableIsas() {
  std::vector<CpuIsa> out;
  for (CpuIsa isa : {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (CpuSupports(isa)) {
      out.push_back(isa);
    } else {
      WARN("this CPU lacks " << ToString(isa) << ": that variant is NOT tested here");
    }
  }
  return out;
}

at::ScalarType ToScalarType(ElemType t) {
  return t == ElemType::kFp32 ? at::kFloat : t == ElemType::kFp16 ? at::kHalf : at::kBFloat16;
}

float Bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

TEST_CASE("fp16 and bf16 conversions agree with c10 (round to nearest even)", "[cpu_adam][convert]") {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float ours = HalfBitsToFloat(static_cast<uint16_t>(h));
    const float theirs = static_cast<float>(c10::Half(static_cast<uint16_t>(h), c10::Half::from_bits()));
    if (std::isnan(theirs)) {
      REQUIRE(std::isnan(ours));
    } else {
      REQUIRE(std::memcmp(&ours, &theirs, 4) == 0);
    }
    const float b = Bf16BitsToFloat(static_cast<uint16_t>(h));
    const float bt = static_cast<float>(c10::BFloat16(static_cast<uint16_t>(h), c10::BFloat16::from_bits()));
    if (!std::isnan(bt)) REQUIRE(std::memcmp(&b, &bt, 4) == 0);
  }
  std::mt19937 rng(7);
  std::vector<float> values = {0.0f, -0.0f, 65504.0f, 65519.99f, 65520.0f, 1e-8f, 2.9802322e-08f, 5.96e-8f,
                               6.1035156e-05f, 6.1e-05f, INFINITY, -INFINITY, 1e38f, -3.0e-41f, 0.1f};
  for (int i = 0; i < 2000000; ++i) values.push_back(Bits(rng()));
  for (float f : values) {
    if (std::isnan(f)) {
      CHECK(std::isnan(HalfBitsToFloat(FloatToHalfBits(f))));
      CHECK(FloatToBf16Bits(f) == 0x7fc0);
      continue;
    }
    REQUIRE(FloatToHalfBits(f) == c10::Half(f).x);
    REQUIRE(FloatToBf16Bits(f) == c10::BFloat16(f).x);
  }
}

TEST_CASE("AdamHyper precomputes DeepSpeed/LibTorch step constants", "[cpu_adam]") {
  const AdamHyper h = AdamHyper::Make(1e-3, 0.9, 0.999, 1e-8, 0.1, /*adamw=*/true, 2, 0.5);
  CHECK(h.decay_factor == static_cast<float>(1 - 1e-3 * 0.1));
  CHECK(h.l2 == 0.0f);
  CHECK(h.step_size == Approx(1e-3 / (1 - 0.81)));
  CHECK(h.inv_sqrt_bias_correction2 == Approx(1 / std::sqrt(1 - 0.999 * 0.999)));
  CHECK(h.grad_scale == 0.5f);
  const AdamHyper l2 = AdamHyper::Make(1e-3, 0.9, 0.999, 1e-8, 0.1, /*adamw=*/false, 1, 1.0);
  CHECK(l2.decay_factor == 1.0f);
  CHECK(l2.l2 == 0.1f);
  CHECK_THROWS_WITH(AdamHyper::Make(1e-3, 0.9, 0.999, 1e-8, 0, true, 0, 1), Catch::Contains("1-based"));
  CHECK_THROWS_WITH(ParseCpuIsa("sse"), Catch::Contains("auto, scalar, avx2 or avx512"));
}

// Fixed inputs of one case: fp32 master, m, v and a gradient in `grad_type`, already
// multiplied by the loss scale.
struct Inputs {
  at::Tensor master, m, v, grad;
};

Inputs MakeInputs(int64_t n, ElemType grad_type, double loss_scale, uint64_t seed) {
  at::manual_seed(seed);
  Inputs in;
  // Magnitudes from 1e-6 to 1e5 so the parameter copy crosses fp16's subnormal and
  // overflow ranges.
  in.master = at::randn({n}) * at::pow(10.0, at::randint(-6, 6, {n}).to(at::kFloat));
  in.m = at::randn({n}) * 1e-3;
  in.v = at::rand({n}) * 1e-6;
  in.grad = (at::randn({n}) * 1e-2 * loss_scale).to(ToScalarType(grad_type));
  return in;
}

AdamSpan SpanOf(Inputs& in, ElemType grad_type, at::Tensor* out, ElemType out_type) {
  AdamSpan s;
  s.master = in.master.data_ptr<float>();
  s.m = in.m.data_ptr<float>();
  s.v = in.v.data_ptr<float>();
  s.grad = in.grad.data_ptr();
  s.grad_type = grad_type;
  s.param_out = out != nullptr ? out->data_ptr() : nullptr;
  s.out_type = out_type;
  s.numel = in.master.numel();
  return s;
}

bool BitwiseEqual(const at::Tensor& a, const at::Tensor& b) {
  // Empty tensors have null data: memcmp must not see them, even for 0 bytes (UBSan).
  return a.numel() == b.numel() && (a.nbytes() == 0 || std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()) == 0);
}

TEST_CASE("every variant is bitwise equal to the scalar reference", "[cpu_adam][variants]") {
  const auto reference = KernelsFor(CpuIsa::kScalar);
  for (CpuIsa isa : AvailableIsas()) {
    const auto kernels = KernelsFor(isa);
    for (int64_t n : {0, 1, 7, 15, 16, 17, 1000003}) {
      for (ElemType gt : {ElemType::kFp32, ElemType::kFp16, ElemType::kBf16}) {
        for (ElemType ot : {ElemType::kFp16, ElemType::kBf16, ElemType::kFp32}) {
          for (bool adamw : {true, false}) {
            for (double wd : {0.0, 0.1}) {
              for (double loss_scale : {1.0, 1024.0}) {
                if (n == 1000003 && ot != gt) continue;  // the big size: output dtype = gradient dtype
                CAPTURE(ToString(isa), n, static_cast<int>(gt), static_cast<int>(ot), adamw, wd, loss_scale);
                Inputs a = MakeInputs(n, gt, loss_scale, 11);
                Inputs b = MakeInputs(n, gt, loss_scale, 11);
                at::Tensor out_a = at::empty({n}, ToScalarType(ot)), out_b = at::empty({n}, ToScalarType(ot));
                const AdamHyper h = AdamHyper::Make(1e-3, 0.9, 0.95, 1e-8, wd, adamw, 3, 1.0 / loss_scale);
                reference.adam(SpanOf(a, gt, &out_a, ot), h);
                kernels.adam(SpanOf(b, gt, &out_b, ot), h);
                REQUIRE(BitwiseEqual(a.master, b.master));
                REQUIRE(BitwiseEqual(a.m, b.m));
                REQUIRE(BitwiseEqual(a.v, b.v));
                REQUIRE(BitwiseEqual(out_a, out_b));
                REQUIRE(BitwiseEqual(out_b, b.master.to(ToScalarType(ot))));  // RNE copy, as LibTorch
              }
            }
          }
        }
      }
    }
  }
}

// optimizer.state_dtype bf16: every variant equals the scalar reference bitwise, and
// the update equals the fp32 update of the widened moments with m and v then rounded to
// nearest even (the contract of cpu_adam.h), parameters and master included.
TEST_CASE("bf16 moments: variants bitwise equal; equal to the fp32 update rounded", "[cpu_adam][state_dtype]") {
  const auto reference = KernelsFor(CpuIsa::kScalar);
  for (CpuIsa isa : AvailableIsas()) {
    const auto kernels = KernelsFor(isa);
    for (int64_t n : {0, 1, 15, 17, 100003}) {
      for (ElemType gt : {ElemType::kFp32, ElemType::kBf16, ElemType::kFp16}) {  // fp16: fp16 compute's
        for (bool adamw : {true, false}) {
          CAPTURE(ToString(isa), n, static_cast<int>(gt), adamw);
          Inputs in = MakeInputs(n, gt, 1.0, 23);
          const at::Tensor m16 = in.m.to(at::kBFloat16), v16 = in.v.to(at::kBFloat16);
          const AdamHyper h = AdamHyper::Make(1e-3, 0.9, 0.95, 1e-8, 0.1, adamw, 5, 1.0);
          // The fp32 update of the widened moments: the reference the contract names.
          Inputs f32 = in;
          f32.master = in.master.clone();
          f32.m = m16.to(at::kFloat);
          f32.v = v16.to(at::kFloat);
          const ElemType ot = gt == ElemType::kFp16 ? ElemType::kFp16 : ElemType::kBf16;  // fp16 compute: fp16 out
          at::Tensor out_f32 = at::empty({n}, ToScalarType(ot));
          reference.adam(SpanOf(f32, gt, &out_f32, ot), h);
          for (const auto* k : {&reference, &kernels}) {
            Inputs b = in;
            b.master = in.master.clone();
            at::Tensor m = m16.clone(), v = v16.clone(), out = at::empty({n}, ToScalarType(ot));
            AdamSpan s = SpanOf(b, gt, &out, ot);
            s.m = m.data_ptr();
            s.v = v.data_ptr();
            s.state_type = ElemType::kBf16;
            k->adam(s, h);
            REQUIRE(BitwiseEqual(b.master, f32.master));
            REQUIRE(BitwiseEqual(out, out_f32));
            REQUIRE(BitwiseEqual(m, f32.m.to(at::kBFloat16)));
            REQUIRE(BitwiseEqual(v, f32.v.to(at::kBFloat16)));
          }
        }
      }
    }
  }
}

// Block-wise 8-bit moments of `in` (m signed, v unsigned), as a run would hold them.
struct Int8State {
  at::Tensor m_codes, v_codes, m_scale, v_scale;
};

Int8State Quantize(const Inputs& in) {
  const int64_t n = in.m.numel(), blocks = (n + kQuantBlockNumel - 1) / kQuantBlockNumel;
  Int8State q{at::empty({n}, at::kByte), at::empty({n}, at::kByte), at::empty({blocks}), at::empty({blocks})};
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t b0 = b * kQuantBlockNumel, len = std::min(kQuantBlockNumel, n - b0);
    q.m_scale[b] = QuantizeBlock(in.m.data_ptr<float>() + b0, len, QuantCode::kSigned, q.m_codes.data_ptr<uint8_t>() + b0);
    q.v_scale[b] = QuantizeBlock(in.v.data_ptr<float>() + b0, len, QuantCode::kUnsigned, q.v_codes.data_ptr<uint8_t>() + b0);
  }
  return q;
}

at::Tensor Dequantize(const at::Tensor& codes, const at::Tensor& scales, QuantCode code) {
  at::Tensor out = at::empty({codes.numel()});
  for (int64_t b = 0; b < scales.numel(); ++b) {
    const int64_t b0 = b * kQuantBlockNumel, len = std::min(kQuantBlockNumel, codes.numel() - b0);
    DequantizeBlock(codes.data_ptr<uint8_t>() + b0, len, scales[b].item<float>(), code, out.data_ptr<float>() + b0);
  }
  return out;
}

AdamSpan Int8Span(Inputs& in, Int8State& q, ElemType gt, at::Tensor* out, ElemType ot = ElemType::kBf16) {
  AdamSpan s = SpanOf(in, gt, out, ot);
  s.m = q.m_codes.data_ptr();
  s.v = q.v_codes.data_ptr();
  s.state_type = ElemType::kInt8;
  s.m_scale = q.m_scale.data_ptr<float>();
  s.v_scale = q.v_scale.data_ptr<float>();
  return s;
}

// The variants' block (de)quantisers equal block_quant's, bitwise, on blocks holding what
// Adam's moments can: magnitudes over 12 decades, zeros of both signs, a NaN (ignored by
// the scale), all-zero blocks, partial blocks.
TEST_CASE("int8: the AVX2 and AVX-512 block quantisers equal QuantizeBlock / DequantizeBlock bitwise",
          "[cpu_adam][state_dtype][int8]") {
  using QuantFn = float (*)(const float*, int64_t, QuantCode, uint8_t*);
  using DequantFn = void (*)(const uint8_t*, int64_t, float, QuantCode, float*);
  std::vector<std::pair<QuantFn, DequantFn>> variants;
  if (CpuSupports(CpuIsa::kAvx2)) variants.emplace_back(internal::QuantizeAvx2, internal::DequantizeAvx2);
  if (CpuSupports(CpuIsa::kAvx512)) variants.emplace_back(internal::QuantizeAvx512, internal::DequantizeAvx512);
  if (internal::CpuHasAvx512Vbmi()) {
    variants.emplace_back(internal::QuantizeAvx512, internal::DequantizeAvx512Vbmi);
  } else {
    WARN("this CPU lacks AVX-512 VBMI: that dequantiser is NOT tested here");
  }
  if (variants.size() < 2) WARN("this CPU lacks AVX2 or AVX-512: those block quantisers are NOT tested here");
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  for (int trial = 0; trial < 400; ++trial) {
    const int64_t n = trial % 5 == 0 ? 1 + static_cast<int64_t>(rng() % 255) : kQuantBlockNumel;
    const QuantCode code = trial % 2 == 0 ? QuantCode::kSigned : QuantCode::kUnsigned;
    std::vector<float> x(n);
    for (auto& e : x) {
      e = normal(rng) * std::pow(10.0f, -static_cast<float>(rng() % 12));
      if (code == QuantCode::kUnsigned) e = std::fabs(e);
    }
    if (trial % 7 == 0) x[0] = -0.0f;
    if (trial % 11 == 0) x[n / 2] = std::numeric_limits<float>::quiet_NaN();
    if (trial % 13 == 0) std::fill(x.begin(), x.end(), 0.0f);
    std::vector<uint8_t> ref(n), got(n);
    const float ref_scale = QuantizeBlock(x.data(), n, code, ref.data());
    std::vector<float> ref_back(n), got_back(n);
    DequantizeBlock(ref.data(), n, ref_scale, code, ref_back.data());
    for (const auto& [quant, dequant] : variants) {
      CAPTURE(trial, n);
      CHECK(quant(x.data(), n, code, got.data()) == ref_scale);
      CHECK(got == ref);
      dequant(ref.data(), n, ref_scale, code, got_back.data());
      CHECK(std::memcmp(got_back.data(), ref_back.data(), n * sizeof(float)) == 0);
    }
  }
  // Every code of both codes in one block, in an order that is not the codes' (the VBMI
  // dequantiser transposes its input), at scales of several magnitudes.
  std::vector<uint8_t> all(kQuantBlockNumel);
  for (int c = 0; c < kQuantBlockNumel; ++c) all[c] = static_cast<uint8_t>((c * 37 + 11) % kQuantBlockNumel);
  for (QuantCode code : {QuantCode::kSigned, QuantCode::kUnsigned}) {
    for (float scale : {1.0f, 0.37f, 3.1e-9f, 0.0f}) {
      std::vector<float> ref_back(kQuantBlockNumel), got_back(kQuantBlockNumel);
      DequantizeBlock(all.data(), kQuantBlockNumel, scale, code, ref_back.data());
      for (const auto& variant : variants) {
        CAPTURE(scale);
        variant.second(all.data(), kQuantBlockNumel, scale, code, got_back.data());
        CHECK(std::memcmp(got_back.data(), ref_back.data(), sizeof(float) * kQuantBlockNumel) == 0);
      }
    }
  }
}

// optimizer.state_dtype int8: every variant equals the scalar reference bitwise, the
// update equals the fp32 update of the dequantised moments with m and v then quantised
// (the contract of cpu_adam.h), and ParallelAdam's result does not depend on the threads.
TEST_CASE("int8 moments: variants bitwise equal; equal to the fp32 update quantised; any thread count",
          "[cpu_adam][state_dtype][int8]") {
  const auto reference = KernelsFor(CpuIsa::kScalar);
  for (CpuIsa isa : AvailableIsas()) {
    const auto kernels = KernelsFor(isa);
    for (int64_t n : {1, 17, 256, 257, 100003}) {
      for (ElemType gt : {ElemType::kFp32, ElemType::kBf16, ElemType::kFp16}) {  // fp16: fp16 compute's
        CAPTURE(ToString(isa), n, static_cast<int>(gt));
        const Inputs in = MakeInputs(n, gt, 1.0, 29);
        Inputs start = in;
        start.v = in.v * at::pow(10.0, at::randint(-6, 1, {n}).to(at::kFloat));  // v over decades
        const Int8State q0 = Quantize(start);
        const AdamHyper h = AdamHyper::Make(1e-3, 0.9, 0.95, 1e-8, 0.1, true, 5, 1.0);
        // The contract's reference: fp32 moments = the dequantised ones, the fp32 update, quantised.
        Inputs f32 = start;
        f32.master = start.master.clone();
        f32.m = Dequantize(q0.m_codes, q0.m_scale, QuantCode::kSigned);
        f32.v = Dequantize(q0.v_codes, q0.v_scale, QuantCode::kUnsigned);
        const ElemType ot = gt == ElemType::kFp16 ? ElemType::kFp16 : ElemType::kBf16;  // fp16 compute: fp16 out
        at::Tensor out_f32 = at::empty({n}, ToScalarType(ot));
        reference.adam(SpanOf(f32, gt, &out_f32, ot), h);
        const Int8State expect = Quantize(f32);
        for (const auto* k : {&reference, &kernels}) {
          for (int threads : {1, 3}) {
            Inputs b = start;
            b.master = start.master.clone();
            Int8State q{q0.m_codes.clone(), q0.v_codes.clone(), q0.m_scale.clone(), q0.v_scale.clone()};
            at::Tensor out = at::empty({n}, ToScalarType(ot));
            ParallelAdam(*k, {{Int8Span(b, q, gt, &out, ot), h}}, threads);
            CAPTURE(threads);
            REQUIRE(BitwiseEqual(b.master, f32.master));
            REQUIRE(BitwiseEqual(out, out_f32));
            REQUIRE(BitwiseEqual(q.m_codes, expect.m_codes));
            REQUIRE(BitwiseEqual(q.v_codes, expect.v_codes));
            REQUIRE(BitwiseEqual(q.m_scale, expect.m_scale));
            REQUIRE(BitwiseEqual(q.v_scale, expect.v_scale));
          }
        }
      }
    }
  }
}

// optimizer.master_weights none (cpu_adam.h: master null): the weights are bf16 in
// param_out, updated in fp32 and stored with stochastic rounding. In every state dtype
// every variant equals the scalar reference bitwise for any thread split; with fp32
// moments the stored weight is one of the two bf16 neighbours of the fp32 update of the
// widened weight (that value itself when it is a bf16 value), and m and v equal that
// update's.
TEST_CASE("stochastic rounding without a master: variants bitwise, any threads; a bf16 neighbour of the fp32 update",
          "[cpu_adam][state_dtype][sr]") {
  const auto reference = KernelsFor(CpuIsa::kScalar);
  for (CpuIsa isa : AvailableIsas()) {
    const auto kernels = KernelsFor(isa);
    for (int64_t n : {1, 17, 256, 100003}) {
      for (ElemType st : {ElemType::kFp32, ElemType::kBf16, ElemType::kInt8}) {
        CAPTURE(ToString(isa), n, static_cast<int>(st));
        const Inputs in = MakeInputs(n, ElemType::kBf16, 1.0, 31);
        const at::Tensor w16 = in.master.to(at::kBFloat16);
        const Int8State q0 = Quantize(in);
        const AdamHyper h = AdamHyper::Make(1e-3, 0.9, 0.95, 1e-8, 0.1, true, 5, 1.0);
        // Runs kernels `k` over `threads` threads; returns the weights, m and v (m and v
        // as stored: fp32, bf16, or the codes).
        auto run = [&](const CpuAdamKernels& k, int threads) {
          Inputs b = in;
          b.m = in.m.clone();
          b.v = in.v.clone();
          at::Tensor w = w16.clone(), m16 = in.m.to(at::kBFloat16), v16 = in.v.to(at::kBFloat16);
          Int8State q{q0.m_codes.clone(), q0.v_codes.clone(), q0.m_scale.clone(), q0.v_scale.clone()};
          AdamSpan s = st == ElemType::kInt8 ? Int8Span(b, q, ElemType::kBf16, &w) : SpanOf(b, ElemType::kBf16, &w, ElemType::kBf16);
          if (st == ElemType::kBf16) {
            s.m = m16.data_ptr();
            s.v = v16.data_ptr();
            s.state_type = ElemType::kBf16;
          }
          s.master = nullptr;
          s.sr_seed = 0x9e3779b9u;
          s.sr_index = 1000;
          ParallelAdam(k, {{s, h}}, threads);
          return st == ElemType::kInt8   ? std::vector<at::Tensor>{w, q.m_codes, q.v_codes, q.m_scale, q.v_scale}
                 : st == ElemType::kBf16 ? std::vector<at::Tensor>{w, m16, v16}
                                         : std::vector<at::Tensor>{w, b.m, b.v};
        };
        const std::vector<at::Tensor> want = run(reference, 1);
        for (int threads : {1, 3}) {
          CAPTURE(threads);
          const std::vector<at::Tensor> got = run(kernels, threads);
          for (size_t t = 0; t < want.size(); ++t) REQUIRE(BitwiseEqual(got[t], want[t]));
        }
        if (st != ElemType::kFp32) continue;
        Inputs f32 = in;  // the fp32 update of the widened weights
        f32.master = w16.to(at::kFloat);
        f32.m = in.m.clone();
        f32.v = in.v.clone();
        reference.adam(SpanOf(f32, ElemType::kBf16, nullptr, ElemType::kBf16), h);
        REQUIRE(BitwiseEqual(want[1], f32.m));
        REQUIRE(BitwiseEqual(want[2], f32.v));
        const uint16_t* w = static_cast<const uint16_t*>(want[0].data_ptr());
        const float* p = f32.master.data_ptr<float>();
        int64_t up = 0, between = 0;
        for (int64_t i = 0; i < n; ++i) {
          uint32_t bits;
          std::memcpy(&bits, &p[i], 4);
          const uint32_t down = bits >> 16;  // toward zero; the other neighbour is down + 1
          INFO("element " << i);
          REQUIRE((w[i] == down || (w[i] == down + 1 && (bits & 0xffffu) != 0)));
          if ((bits & 0xffffu) != 0) {
            ++between;
            up += w[i] == down + 1;
          }
        }
        if (between > 1000) {  // both neighbours occur: the rounding is not a truncation or nearest
          CHECK(up > between / 10);
          CHECK(up < between * 9 / 10);
        }
      }
    }
  }
}

// FloatToBf16Stochastic with SrHash: bf16 values and NaN as specified, and a value a
// fraction f of the way to the next bf16 value rounds up in a share f of the indices.
TEST_CASE("stochastic rounding: unbiased, exact on bf16 values, NaN to 0x7fc0", "[cpu_adam][sr]") {
  const float ulp = 1.0f / 128;  // bf16 spacing in [1, 2)
  for (double f : {0.01, 0.3, 0.5, 0.9}) {
    const float x = 1.0f + static_cast<float>(f) * ulp;
    int64_t up = 0;
    const int64_t count = 200000;
    for (int64_t i = 0; i < count; ++i) {
      const uint16_t b = FloatToBf16Stochastic(x, SrHash(static_cast<uint32_t>(i), 12345u));
      REQUIRE((b == 0x3f80 || b == 0x3f81));
      up += b == 0x3f81;
    }
    CAPTURE(f);
    CHECK(std::abs(static_cast<double>(up) / count - f) < 0.005);
  }
  for (uint32_t i = 0; i < 1000; ++i) {
    CHECK(FloatToBf16Stochastic(-2.5f, SrHash(i, 7u)) == FloatToBf16Bits(-2.5f));
    CHECK(FloatToBf16Stochastic(std::nanf(""), SrHash(i, 7u)) == 0x7fc0);
  }
  CHECK(FloatToBf16Stochastic(1.0f + 0.5f * ulp, 0u) == 0x3f80);  // r = 0: truncation
  CHECK(FloatToBf16Stochastic(1.0f + 0.5f * ulp, 0xffff0000u) == 0x3f81);
  CHECK(SrHash(1, 2) != SrHash(2, 1));
  CHECK(SrHash(5, 1) != SrHash(5, 2));
}

void CheckClose(const at::Tensor& ours, const at::Tensor& ref, double rtol, double atol, const char* what) {
  const at::Tensor err = (ours - ref).abs() - (ref.abs() * rtol + atol);
  const double worst = ours.numel() == 0 ? -1.0 : err.max().item<double>();
  INFO(what << ": worst excess over tolerance " << worst);
  CHECK(worst <= 0.0);
}

TEST_CASE("every variant matches torch::optim::AdamW and Adam over three steps", "[cpu_adam][torch]") {
  const double lr = 1e-3, b1 = 0.9, b2 = 0.95, eps = 1e-8;
  for (CpuIsa isa : AvailableIsas()) {
    const auto kernels = KernelsFor(isa);
    for (int64_t n : {0, 1, 7, 15, 16, 17, 1000003}) {
      for (ElemType gt : {ElemType::kFp32, ElemType::kFp16, ElemType::kBf16}) {
        for (double loss_scale : {1.0, 4096.0}) {
          for (double wd : {0.0, 0.1}) {
            for (bool adamw : {true, false}) {
              CAPTURE(ToString(isa), n, static_cast<int>(gt), loss_scale, wd, adamw);
              at::manual_seed(5);
              at::Tensor master = at::randn({n});
              at::Tensor m = at::zeros({n}), v = at::zeros({n});
              at::Tensor p = master.clone().requires_grad_(true);
              std::unique_ptr<torch::optim::Optimizer> opt;
              if (adamw) {
                opt = std::make_unique<torch::optim::AdamW>(
                    std::vector<at::Tensor>{p}, torch::optim::AdamWOptions(lr).betas({b1, b2}).eps(eps).weight_decay(wd));
              } else {
                opt = std::make_unique<torch::optim::Adam>(
                    std::vector<at::Tensor>{p}, torch::optim::AdamOptions(lr).betas({b1, b2}).eps(eps).weight_decay(wd));
              }
              for (int64_t step = 1; step <= 3; ++step) {
                const at::Tensor grad = (at::randn({n}) * 1e-2 * loss_scale).to(ToScalarType(gt)).contiguous();
                AdamSpan s;
                s.master = master.data_ptr<float>();
                s.m = m.data_ptr<float>();
                s.v = v.data_ptr<float>();
                s.grad = grad.data_ptr();
                s.grad_type = gt;
                s.numel = n;
                kernels.adam(s, AdamHyper::Make(lr, b1, b2, eps, wd, adamw, step, 1.0 / loss_scale));
                p.mutable_grad() = grad.to(at::kFloat) * (1.0 / loss_scale);
                opt->step();
              }
              if (n == 0) continue;
              auto& state = *opt->state().at(p.unsafeGetTensorImpl());
              const at::Tensor ref_m = adamw ? static_cast<torch::optim::AdamWParamState&>(state).exp_avg()
                                             : static_cast<torch::optim::AdamParamState&>(state).exp_avg();
              const at::Tensor ref_v = adamw ? static_cast<torch::optim::AdamWParamState&>(state).exp_avg_sq()
                                             : static_cast<torch::optim::AdamParamState&>(state).exp_avg_sq();
              CheckClose(master, p.detach(), 1e-6, 1e-9, "param");
              CheckClose(m, ref_m, 0.0, 1e-6 * ref_m.abs().max().item<double>(), "m");
              CheckClose(v, ref_v, 1e-5, 1e-15, "v");
            }
          }
        }
      }
    }
  }
}

TEST_CASE("ParallelAdam covers every element once; results independent of threads", "[cpu_adam][parallel]") {
  const auto kernels = KernelsFor(BestCpuIsa());
  const std::vector<int64_t> sizes = {1000, 17, 0, 70001, 64, 3};
  auto run = [&](int threads) {
    std::vector<Inputs> inputs;
    std::vector<at::Tensor> outs;
    for (size_t i = 0; i < sizes.size(); ++i) {
      inputs.push_back(MakeInputs(sizes[i], ElemType::kBf16, 1.0, 100 + i));
      outs.push_back(at::full({sizes[i]}, -1.0, at::kBFloat16));
    }
    std::vector<AdamWork> work;
    for (size_t i = 0; i < sizes.size(); ++i) {
      const double wd = i % 2 == 0 ? 0.1 : 0.0;  // the per-parameter decay mask
      work.push_back({SpanOf(inputs[i], ElemType::kBf16, &outs[i], ElemType::kBf16),
                      AdamHyper::Make(1e-3, 0.9, 0.95, 1e-8, wd, true, 1, 1.0)});
    }
    ParallelAdam(kernels, work, threads);
    std::vector<at::Tensor> flat;
    for (size_t i = 0; i < sizes.size(); ++i) {
      flat.push_back(inputs[i].master);
      flat.push_back(inputs[i].m);
      flat.push_back(outs[i].to(at::kFloat));
    }
    return at::cat(flat);
  };
  const at::Tensor one = run(1);
  for (int threads : {2, 3, 7, 64}) {
    CAPTURE(threads);
    CHECK(BitwiseEqual(run(threads), one));
  }
  // A kernel run twice on an element would move m twice: compare against sequential calls.
  std::vector<Inputs> seq;
  for (size_t i = 0; i < sizes.size(); ++i) seq.push_back(MakeInputs(sizes[i], ElemType::kBf16, 1.0, 100 + i));
  for (size_t i = 0; i < sizes.size(); ++i) {
    kernels.adam(SpanOf(seq[i], ElemType::kBf16, nullptr, ElemType::kBf16),
                 AdamHyper::Make(1e-3, 0.9, 0.95, 1e-8, i % 2 == 0 ? 0.1 : 0.0, true, 1, 1.0));
  }
  int64_t offset = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    CHECK(BitwiseEqual(one.narrow(0, offset, sizes[i]).contiguous(), seq[i].master));
    offset += 3 * sizes[i];
  }
}

TEST_CASE("sum of squares: exact in double, and inf/NaN flag overflow", "[cpu_adam][overflow]") {
  for (CpuIsa isa : AvailableIsas()) {
    const auto kernels = KernelsFor(isa);
    for (ElemType gt : {ElemType::kFp32, ElemType::kFp16, ElemType::kBf16}) {
      for (int64_t n : {0, 1, 17, 100003}) {
        CAPTURE(ToString(isa), static_cast<int>(gt), n);
        at::manual_seed(3);
        at::Tensor g = at::randn({n}).to(ToScalarType(gt));
        const double expected = n == 0 ? 0.0 : g.to(at::kDouble).pow(2).sum().item<double>();
        CHECK(kernels.sum_squares(g.data_ptr(), gt, n) == Approx(expected).epsilon(1e-12));
        if (n == 0) continue;
        for (float bad : {INFINITY, -INFINITY, NAN}) {
          at::Tensor h = g.clone();
          h[n / 2] = bad;
          CHECK_FALSE(std::isfinite(kernels.sum_squares(h.data_ptr(), gt, n)));
        }
      }
    }
    // Over threads: the same sum (to rounding), and an inf in any span is seen.
    at::manual_seed(4);
    std::vector<at::Tensor> grads = {at::randn({70001}).to(at::kBFloat16), at::randn({0}), at::randn({333}),
                                     at::randn({5000}).to(at::kHalf)};
    std::vector<GradSpan> spans;
    double expected = 0.0;
    for (const auto& g : grads) {
      spans.push_back({g.data_ptr(), g.scalar_type() == at::kFloat ? ElemType::kFp32
                                     : g.scalar_type() == at::kHalf ? ElemType::kFp16 : ElemType::kBf16, g.numel()});
      expected += g.numel() == 0 ? 0.0 : g.to(at::kDouble).pow(2).sum().item<double>();
    }
    for (int threads : {1, 2, 3, 7}) {
      CAPTURE(threads);
      CHECK(ParallelSumSquares(kernels, spans, threads) == Approx(expected).epsilon(1e-12));
    }
    grads[2][332] = NAN;
    CHECK(std::isnan(ParallelSumSquares(kernels, spans, 3)));
    // A large but finite fp32 gradient is not an overflow (squares accumulate in double).
    const float big[2] = {3e30f, -3e30f};
    CHECK(std::isfinite(kernels.sum_squares(big, ElemType::kFp32, 2)));
  }
}

}  // namespace
}  // namespace ps::optim
