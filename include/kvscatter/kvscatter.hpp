// The whole C++ API in one include.
#pragma once

#include "kvscatter/dtype.h"
#include "kvscatter/error.h"
#include "kvscatter/formats.h"
#include "kvscatter/kv_cache_update.h"
#include "kvscatter/paged_cache_gather.h"
#include "kvscatter/paged_kv_write.h"
#include "kvscatter/paged_latent_write.h"
#include "kvscatter/runtime.h"
#include "kvscatter/tensor.h"
#include "kvscatter/version.h"
