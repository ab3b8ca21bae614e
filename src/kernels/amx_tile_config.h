// The AMX tile configuration (palette 1) both AMX kernel files load with _tile_loadconfig:
// per tile register, its rows and bytes per row. Include only from *_amx.cpp files.
#pragma once

#include <cstdint>

namespace pagoda::matmul_detail {

struct alignas(64) AmxTileConfig {
  uint8_t palette_id = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

}  // namespace pagoda::matmul_detail
