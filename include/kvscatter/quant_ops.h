// Compatibility include: the two quantized cache writers, now one header each.
#pragma once

#include "kvscatter/kv_compress_epilog.h"
#include "kvscatter/scatter_pa_kv_cache_with_k_scale.h"
