// Attribute-type schemas and values (a schema document, then a value, cut at the input's first zero byte; without
// a schema the input is a value of the match type): a schema that reads prints a document that reads back to the
// same type, and a value that validates, as a whole state or as a patch, encodes to a value that prints and parses.
import FuzzSupport
import MarqueeCore

fuzz { input in
    let (first, second) = input.halves
    guard let firstValue = try? JSONValue(parsing: first) else { return }
    var type = matchType
    var value = firstValue
    if let schema = try? ActivityType(json: firstValue) {
        let reread = try? ActivityType(json: schema.json)
        check(reread == schema, "a schema's document reads back to another type")
        type = schema
        guard let secondValue = try? JSONValue(parsing: second) else { return }
        value = secondValue
    }
    if let encoded = try? type.encodeContentState(value) {
        checkRoundTrip(encoded)
        _ = type.significantChanges(from: nil, to: encoded)
    }
    if let attributes = try? type.encodeAttributes(value) { checkRoundTrip(attributes) }
    if type == matchType, let patched = try? type.patchContentState(matchState, with: value) {
        checkRoundTrip(patched)
        _ = type.significantChanges(from: matchState, to: patched)
    }
}
