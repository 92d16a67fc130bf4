package manifests

// DecodeLegacy is Decode without json/v2: the names walk, then
// encoding/json.
func DecodeLegacy(b []byte, v any) error { return decode(b, v, false) }
