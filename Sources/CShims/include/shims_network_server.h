// Shims for the network servers (TLS server context, HTTP/2 and HTTP/1.1 servers); used only by Network.
// OpenSSL configures contexts through function-like macros, which Swift cannot call.
#pragma once
#include <sys/types.h>
#include <sys/select.h>
#include <string.h>
#include <openssl/ssl.h>

/// TLS 1.2 or newer, no compression, no renegotiation, server cipher preference, small idle buffers.
static inline int marquee_server_tls_configure(SSL_CTX *ctx) {
    if (SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION) != 1) return 0;
    SSL_CTX_set_options(ctx, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE);
    SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);
    return 1;
}

/// Adds one certificate of the chain sent after the leaf; takes a reference of its own.
static inline int marquee_server_tls_add_chain_certificate(SSL_CTX *ctx, X509 *cert) {
    return (int)SSL_CTX_add1_chain_cert(ctx, cert);
}

static int marquee_server_alpn_select_h2(SSL *ssl, const unsigned char **out, unsigned char *outlen,
                                         const unsigned char *in, unsigned int inlen, void *arg) {
    (void)ssl; (void)arg;
    // The client's list is length-prefixed protocol names; only h2 is acceptable.
    for (unsigned int i = 0; i < inlen; ) {
        unsigned int len = in[i];
        if (i + 1 + len > inlen) break;
        if (len == 2 && memcmp(in + i + 1, "h2", 2) == 0) {
            *out = in + i + 1;
            *outlen = 2;
            return SSL_TLSEXT_ERR_OK;
        }
        i += 1 + len;
    }
    return SSL_TLSEXT_ERR_ALERT_FATAL;
}

/// Makes the handshake fail for clients whose ALPN list lacks h2 (clients sending no ALPN are refused later).
static inline void marquee_server_tls_require_h2(SSL_CTX *ctx) {
    SSL_CTX_set_alpn_select_cb(ctx, marquee_server_alpn_select_h2, NULL);
}
