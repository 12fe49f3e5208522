// The record framing of TensorBoard event files (TFRecord): each record is
//   uint64 length | uint32 masked CRC-32C of the length bytes | data | uint32 masked CRC-32C of data
// all little-endian. Pure functions, any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace ps::trainer {

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), as in iSCSI and TFRecord:
// Crc32c("123456789") == 0xE3069283.
uint32_t Crc32c(const void* data, size_t bytes);

// TFRecord's masked CRC: ((crc >> 15) | (crc << 17)) + 0xa282ead8, so that a CRC of
// data that itself holds CRCs does not come out trivially.
uint32_t MaskedCrc32c(const void* data, size_t bytes);

// `data` framed as one record (data.size() + 16 bytes).
std::string FrameRecord(const std::string& data);

}  // namespace ps::trainer
