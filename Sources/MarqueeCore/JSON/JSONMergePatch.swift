extension JSONValue {
    /// RFC 7396 JSON merge patch: objects merge member by member, a null member removes the key,
    /// anything else (arrays included) replaces the target. New keys are appended in the patch's order.
    public func merging(patch: JSONValue) -> JSONValue {
        guard case .object(let patchObject) = patch else { return patch }
        var result = objectValue ?? JSONObject()
        for (key, value) in patchObject {
            if value == .null {
                result.removeValue(forKey: key)
            } else {
                result[key] = (result[key] ?? .null).merging(patch: value)
            }
        }
        return .object(result)
    }
}
