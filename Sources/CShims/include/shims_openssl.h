// Shims for openssl; used only by its wrapper module.
#pragma once
#include <openssl/ssl.h>
#include <openssl/evp.h>
