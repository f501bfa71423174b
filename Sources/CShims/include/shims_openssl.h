// Shims for OpenSSL; used only by its wrapper modules (Crypto, Network).
// OpenSSL spells several calls as function-like macros, which Swift cannot import.
#pragma once
#include <openssl/ssl.h>
#include <openssl/evp.h>
#include <openssl/bio.h>
#include <openssl/crypto.h>
#include <openssl/x509v3.h>

/// BIO_get_mem_data: the bytes written so far to a memory BIO; returns their count.
static inline long marquee_BIO_get_mem_data(BIO *bio, char **data) {
    return BIO_get_mem_data(bio, data);
}

/// OPENSSL_free: releases memory OpenSSL allocated for the caller.
static inline void marquee_OPENSSL_free(void *pointer) {
    OPENSSL_free(pointer);
}

/// X509V3_set_ctx_nodb: extension contexts built without a configuration database.
static inline void marquee_X509V3_set_ctx_nodb(X509V3_CTX *ctx) {
    X509V3_set_ctx_nodb(ctx);
}
