// Memory BIOs: the one place PEM text crosses into and out of OpenSSL.
internal import COpenSSL
internal import CShims

/// Calls `body` with a read-only memory BIO over the UTF-8 bytes of `text`.
func withReadBIO<Result>(_ text: String, _ body: (OpaquePointer) throws(CryptoError) -> Result) throws(CryptoError) -> Result {
    let bytes = Array(text.utf8)
    return try bytes.withUnsafeBufferPointer { buffer throws(CryptoError) in
        let bio = try check(BIO_new_mem_buf(buffer.baseAddress, Int32(buffer.count)), "BIO_new_mem_buf")
        defer {
            BIO_free(bio)
            // OpenSSL 3's decoders try several formats and may leave errors behind even on success;
            // a stale queue would confuse the next SSL_get_error on this thread.
            ERR_clear_error()
        }
        return try body(bio)
    }
}

/// Runs `write` against a fresh memory BIO and returns what it wrote as text.
func writtenText(_ operation: String, _ write: (OpaquePointer) -> Int32) throws(CryptoError) -> String {
    let bio = try check(BIO_new(BIO_s_mem()), "BIO_new")
    defer { BIO_free(bio) }
    try check(write(bio), operation)
    var data: UnsafeMutablePointer<CChar>?
    let count = marquee_BIO_get_mem_data(bio, &data)
    guard let data, count > 0 else { throw .openSSL(operation: operation, reason: "wrote nothing") }
    return String(decoding: UnsafeRawBufferPointer(start: data, count: count), as: UTF8.self)
}
