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

// TLS macros the Network module needs (listed in the platform notes).

/// SSL_set_tlsext_host_name: the SNI host name a client sends.
static inline long marquee_SSL_set_tlsext_host_name(SSL *ssl, const char *name) {
    return SSL_set_tlsext_host_name(ssl, name);
}

/// SSL_CTX_set_min_proto_version: e.g. TLS1_2_VERSION.
static inline long marquee_SSL_CTX_set_min_proto_version(SSL_CTX *ctx, int version) {
    return SSL_CTX_set_min_proto_version(ctx, version);
}

/// SSL_CTX_set_mode: e.g. SSL_MODE_RELEASE_BUFFERS; returns the new mode bits.
static inline long marquee_SSL_CTX_set_mode(SSL_CTX *ctx, long mode) {
    return SSL_CTX_set_mode(ctx, mode);
}

/// SSL_get_cipher_name: the negotiated cipher suite, for logs.
static inline const char *marquee_SSL_get_cipher_name(const SSL *ssl) {
    return SSL_get_cipher_name(ssl);
}
