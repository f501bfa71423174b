// MarqueeCore's JSON parser on any bytes: it accepts or refuses without trapping, a refusal points inside the
// input, and an accepted value prints a text that parses back to it (and sorts its keys idempotently).
import FuzzSupport
import MarqueeCore

fuzz { input in
    let value: JSONValue
    do throws(JSONParseError) {
        value = try JSONValue(parsing: input.bytes)
    } catch {
        check(error.offset >= 0 && error.offset <= input.bytes.count, "a refusal's offset \(error.offset) is outside the input")
        check(error.line >= 1 && error.column >= 1, "a refusal's line \(error.line) or column \(error.column) is below 1")
        return
    }
    checkRoundTrip(value)
    let sorted = value.sortingKeys()
    check(sorted.sortingKeys() == sorted, "sorting keys twice changes the value")
    check(sorted.byteCount == value.byteCount, "sorting keys changes the text's length")
}
