// The whole C++ API in one include: every public header of include/kvscatter/.
#pragma once

#include "kvscatter/dtype.h"
#include "kvscatter/error.h"
#include "kvscatter/export.h"
#include "kvscatter/formats.h"
#include "kvscatter/kv_cache_update.h"
#include "kvscatter/kv_compress_epilog.h"
#include "kvscatter/kvscatter.h"
#include "kvscatter/paged_cache_gather.h"
#include "kvscatter/paged_kv_write.h"
#include "kvscatter/paged_latent_write.h"
#include "kvscatter/quant_ops.h"
#include "kvscatter/runtime.h"
#include "kvscatter/scatter_pa_kv_cache.h"
#include "kvscatter/scatter_pa_kv_cache_with_k_scale.h"
#include "kvscatter/tensor.h"
#include "kvscatter/version.h"
