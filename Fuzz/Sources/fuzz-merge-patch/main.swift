// RFC 7396 merge patch on two documents (a target, then a patch, cut at the input's first zero byte): applying a
// patch twice changes nothing more (RFC 7396 patches are idempotent), a null member removes its key, and the
// result prints and parses back.
import FuzzSupport
import MarqueeCore

fuzz { input in
    let (first, second) = input.halves
    guard let target = try? JSONValue(parsing: first) else { return }
    let patch = (try? JSONValue(parsing: second)) ?? target
    let merged = target.merging(patch: patch)
    check(merged.merging(patch: patch) == merged, "applying a patch twice differs from applying it once")
    if case .object(let members) = patch {
        check(merged.objectValue != nil, "an object patch gave a non-object")
        for (key, value) in members where value == .null {
            check(merged[key] == nil, "a null member left its key \(key)")
        }
    } else {
        check(merged == patch, "a non-object patch did not replace the target")
    }
    checkRoundTrip(merged)
}
