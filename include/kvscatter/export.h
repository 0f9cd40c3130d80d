// Symbol visibility: the library is built with hidden visibility, so only what is marked here
// (the kvscatter:: C++ API and the kvs* C functions) is exported from the shared library.
#pragma once

#if defined(KVSCATTER_STATIC_DEFINE)
#define KVSCATTER_API
#elif defined(_WIN32)
#ifdef KVSCATTER_BUILDING
#define KVSCATTER_API __declspec(dllexport)
#else
#define KVSCATTER_API __declspec(dllimport)
#endif
#else
#define KVSCATTER_API __attribute__((visibility("default")))
#endif
