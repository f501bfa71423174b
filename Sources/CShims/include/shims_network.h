// Shims for the Network module's TLS client: OpenSSL macros Swift cannot call.
#pragma once
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

/// SNI: SSL_set_tlsext_host_name is a macro around SSL_ctrl.
static inline int marquee_network_ssl_set_server_name(SSL *ssl, const char *name) {
    return (int)SSL_set_tlsext_host_name(ssl, name);
}

/// SSL_CTX_set_min_proto_version is a macro around SSL_CTX_ctrl.
static inline int marquee_network_ssl_ctx_set_min_tls12(SSL_CTX *ctx) {
    return (int)SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
}

/// SSL_CTX_set_mode is a macro; partial writes and moving buffers suit bufferevent_openssl.
static inline void marquee_network_ssl_ctx_set_default_modes(SSL_CTX *ctx) {
    SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
}
