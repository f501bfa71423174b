internal import CLibEvent
// The nghttp2 half of an HTTP/2 client session: the session and its settings, requests handed to nghttp2, and
// the frames, headers, data and stream closes its callbacks report. Runs on the connection's loop thread only,
// like everything in `HTTP2ClientSession`; no teardown happens inside a callback.
internal import CNGHTTP2
import Foundation

extension HTTP2ClientSession {
    // MARK: The nghttp2 session

    func makeSession() throws(NetworkError) {
        var callbacks: OpaquePointer?
        try checkNGHTTP2(nghttp2_session_callbacks_new(&callbacks))
        defer { nghttp2_session_callbacks_del(callbacks) }
        nghttp2_session_callbacks_set_send_callback(callbacks, sendCallback)
        nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks, frameReceivedCallback)
        nghttp2_session_callbacks_set_on_header_callback(callbacks, headerCallback)
        nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks, dataChunkCallback)
        nghttp2_session_callbacks_set_on_stream_close_callback(callbacks, streamClosedCallback)

        var option: OpaquePointer?
        try checkNGHTTP2(nghttp2_option_new(&option))
        defer { nghttp2_option_del(option) }
        // Until the peer's first SETTINGS, assume one stream (APNs starts there), not nghttp2's 100.
        nghttp2_option_set_peer_max_concurrent_streams(option, 1)

        var session: OpaquePointer?
        try checkNGHTTP2(nghttp2_session_client_new2(&session, callbacks, Unmanaged.passUnretained(self).toOpaque(), option))
        self.session = session
        var settings = [
            nghttp2_settings_entry(settings_id: Int32(NGHTTP2_SETTINGS_ENABLE_PUSH.rawValue), value: 0),
            nghttp2_settings_entry(
                settings_id: Int32(NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE.rawValue),
                value: UInt32(configuration.initialWindowSize)),
        ]
        try checkNGHTTP2(nghttp2_submit_settings(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), &settings, settings.count))
        if configuration.connectionWindowSize > 65_535 {
            try checkNGHTTP2(
                nghttp2_session_set_local_window_size(
                    session, UInt8(NGHTTP2_FLAG_NONE.rawValue), 0,
                    Int32(configuration.connectionWindowSize)))
        }
    }

    // MARK: Requests to nghttp2

    /// Hands one request to nghttp2; returns the stream id or a negative nghttp2 error.
    func submit(_ stream: HTTP2ClientStream) -> Int32 {
        let request = stream.request
        headerBytes.removeAll(keepingCapacity: true)
        headerSpans.removeAll(keepingCapacity: true)
        addHeader(":method", request.method)
        addHeader(":scheme", "https")
        addHeader(":authority", request.authority ?? authority)
        addHeader(":path", request.path)
        var hasContentLength = false
        for field in request.headers {
            if field.name == "content-length" { hasContentLength = true }
            // HTTP/1.1 connection headers are malformed in HTTP/2 (RFC 9113, 8.2.2); peers reset for them.
            switch field.name {
            case "connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "host": continue
            default: addHeader(field.name, field.value)
            }
        }
        if !request.body.isEmpty && !hasContentLength { addHeader("content-length", String(request.body.count)) }

        var provider = nghttp2_data_provider(source: nghttp2_data_source(ptr: nil), read_callback: readBodyCallback)
        headerFields.removeAll(keepingCapacity: true)
        return headerBytes.withUnsafeMutableBufferPointer { bytes in
            let base = bytes.baseAddress!
            for span in headerSpans {
                headerFields.append(
                    nghttp2_nv(
                        name: base + span.name, value: base + span.value, namelen: span.nameLength,
                        valuelen: span.valueLength, flags: UInt8(NGHTTP2_NV_FLAG_NONE.rawValue)))
            }
            return request.body.isEmpty
                ? nghttp2_submit_request(session, nil, headerFields, headerFields.count, nil, nil)
                : nghttp2_submit_request(session, nil, headerFields, headerFields.count, &provider, nil)
        }
    }

    func addHeader(_ name: String, _ value: String) {
        let nameStart = headerBytes.count
        headerBytes.append(contentsOf: name.utf8)
        let valueStart = headerBytes.count
        headerBytes.append(contentsOf: value.utf8)
        headerSpans.append((nameStart, valueStart - nameStart, valueStart, headerBytes.count - valueStart))
    }

    /// nghttp2 asks for the next piece of a request body; bodies larger than the flow-control window are
    /// read piece by piece as WINDOW_UPDATEs arrive, so the request keeps its bytes until the stream ends.
    func readBody(
        streamID: Int32, into buffer: UnsafeMutablePointer<UInt8>, length: Int,
        flags: UnsafeMutablePointer<UInt32>
    ) -> Int {
        guard let stream = activeStream(streamID) else { return Int(NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE.rawValue) }
        let body = stream.request.body
        let count = min(length, body.count - stream.bodyOffset)
        body.withUnsafeBufferPointer { bytes in
            buffer.update(from: bytes.baseAddress! + stream.bodyOffset, count: count)
        }
        stream.bodyOffset += count
        if stream.bodyOffset == body.count { flags.pointee |= NGHTTP2_DATA_FLAG_EOF.rawValue }
        return count
    }

    func write(_ data: UnsafePointer<UInt8>, length: Int) -> Int {
        guard let bev else { return Int(NGHTTP2_ERR_CALLBACK_FAILURE.rawValue) }
        if evbuffer_get_length(bufferevent_get_output(bev)) >= HTTP2ClientSession.outputHighWater {
            return Int(NGHTTP2_ERR_WOULDBLOCK.rawValue)
        }
        return bufferevent_write(bev, data, length) == 0 ? length : Int(NGHTTP2_ERR_CALLBACK_FAILURE.rawValue)
    }

    // MARK: Frames and streams (from nghttp2 callbacks; no teardown happens inside them)

    func frameReceived(_ frame: UnsafePointer<nghttp2_frame>) {
        let header = frame.pointee.hd
        switch UInt32(header.type) {
        case NGHTTP2_SETTINGS.rawValue where header.flags & UInt8(NGHTTP2_FLAG_ACK.rawValue) == 0:
            let limit = nghttp2_session_get_remote_settings(session, NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS)
            let clamped = Int(min(limit, 1 << 20))
            if state.settingsReceived(maxConcurrentStreams: clamped) {
                emit(.maxConcurrentStreamsChanged(clamped))
            }
        case NGHTTP2_GOAWAY.rawValue:
            let goaway = frame.pointee.goaway
            let debugData =
                goaway.opaque_data_len > 0
                ? String(decoding: UnsafeBufferPointer(start: goaway.opaque_data, count: goaway.opaque_data_len), as: UTF8.self)
                : ""
            goAway(lastStreamID: goaway.last_stream_id, errorCode: goaway.error_code, debugData: debugData)
        case NGHTTP2_PING.rawValue where header.flags & UInt8(NGHTTP2_FLAG_ACK.rawValue) != 0:
            pingTimeoutTimer?.cancel()
            pingTimeoutTimer = nil
        default:
            break
        }
    }

    func goAway(lastStreamID: Int32, errorCode: UInt32, debugData: String) {
        let failed = state.goAwayReceived(lastStreamID: lastStreamID, errorCode: errorCode, debugData: debugData)
        // The owner hears first, so a caller retrying at once does not pick this connection again.
        emit(.goAway(lastStreamID: lastStreamID, errorCode: errorCode))
        for request in failed.requests { request.finish(.failure(failed.error)) }
    }

    func headerReceived(streamID: Int32, name: UnsafeBufferPointer<UInt8>, value: UnsafeBufferPointer<UInt8>) {
        guard let stream = activeStream(streamID) else { return }
        if name.count == 7 && name.elementsEqual(":status".utf8) {
            var status = 0
            for digit in value { status = status * 10 + Int(digit &- 48) }
            if stream.status >= 100 && stream.status < 200 { stream.headers.removeAll() }
            stream.status = status
        } else {
            if stream.headers.isEmpty { stream.headers.reserveCapacity(8) }
            let field = HTTPField(lowercasedName: String(decoding: name, as: UTF8.self), value: String(decoding: value, as: UTF8.self))
            // Room for the whole body at once, within reason.
            if field.name == "content-length", let length = Int(field.value), length > 0 {
                stream.body.reserveCapacity(min(length, 1 << 24))
            }
            stream.headers.append(field)
        }
    }

    func dataReceived(streamID: Int32, _ data: UnsafeBufferPointer<UInt8>) {
        activeStream(streamID)?.body.append(contentsOf: data)
    }

    /// The request on stream `id` if it is still in flight.
    func activeStream(_ id: Int32) -> HTTP2ClientStream? {
        if let lastStream, lastStream.streamID == id, !lastStream.isFinished { return lastStream }
        lastStream = state.active[id]
        return lastStream
    }

    func streamClosed(id: Int32, errorCode: UInt32) {
        lastStream = nil
        guard let stream = state.streamClosed(id: id) else { return }
        if errorCode == NGHTTP2_NO_ERROR.rawValue && stream.status >= 200 {
            stream.succeed()
        } else if errorCode == NGHTTP2_REFUSED_STREAM.rawValue {
            stream.finish(.failure(.requestNotSent("the peer refused the stream")))
        } else {
            stream.finish(.failure(.streamReset(errorCode: errorCode)))
        }
    }
}

extension HTTPField {
    /// For names that are lowercase already (HTTP/2 requires it), skipping the copy `init` makes.
    init(lowercasedName: String, value: String) {
        self.init(name: "", value: value)
        self.name = lowercasedName
    }
}

// MARK: nghttp2 callbacks (C function pointers; `user_data` is the unretained session)

private func session(_ userData: UnsafeMutableRawPointer?) -> HTTP2ClientSession {
    Unmanaged<HTTP2ClientSession>.fromOpaque(userData!).takeUnretainedValue()
}

private let sendCallback: nghttp2_send_callback = { _, data, length, _, userData in
    session(userData).write(data!, length: length)
}

private let frameReceivedCallback: nghttp2_on_frame_recv_callback = { _, frame, userData in
    session(userData).frameReceived(frame!)
    return 0
}

private let headerCallback: nghttp2_on_header_callback = { _, frame, name, nameLength, value, valueLength, _, userData in
    guard let frame, UInt32(frame.pointee.hd.type) == NGHTTP2_HEADERS.rawValue else { return 0 }
    session(userData).headerReceived(
        streamID: frame.pointee.hd.stream_id,
        name: UnsafeBufferPointer(start: name, count: nameLength),
        value: UnsafeBufferPointer(start: value, count: valueLength))
    return 0
}

private let dataChunkCallback: nghttp2_on_data_chunk_recv_callback = { _, _, streamID, data, length, userData in
    session(userData).dataReceived(streamID: streamID, UnsafeBufferPointer(start: data, count: length))
    return 0
}

private let streamClosedCallback: nghttp2_on_stream_close_callback = { _, streamID, errorCode, userData in
    session(userData).streamClosed(id: streamID, errorCode: errorCode)
    return 0
}

private let readBodyCallback: nghttp2_data_source_read_callback = { _, streamID, buffer, length, flags, _, userData in
    session(userData).readBody(streamID: streamID, into: buffer!, length: length, flags: flags!)
}
