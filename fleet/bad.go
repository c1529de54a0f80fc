package fleet

import (
	"math/rand/v2"
	"strconv"
)

// Rejection reasons of the contract (§2) that BadRate payloads must get.
const (
	ReasonTooLarge      = "too_large"
	ReasonMalformedJSON = "malformed_json"
	ReasonMissingField  = "missing_field"
	ReasonBadCourier    = "bad_courier"
	ReasonBadCoords     = "bad_coordinates"
	ReasonBadTimestamp  = "bad_timestamp"
)

// maxPayload is the contract's payload limit; too_large payloads exceed it.
const maxPayload = 4096

// badKind builds one kind of malformed payload from a valid position e.
// Every kind is wrong in exactly one way, so the contract's first applicable
// reason is the intended one; none holds a newline (it must fit one line of
// a replay file), none is blank (blank replay lines are skipped, not
// rejected), and none is courier_mismatch (that depends on the topic and
// would be a valid position in a replay).
type badKind struct {
	reason string
	build  func(dst []byte, e Event, r *rand.Rand) []byte
}

var badKinds = [...]badKind{
	{ReasonMalformedJSON, func(dst []byte, e Event, r *rand.Rand) []byte { // truncated
		full := appendPosition(nil, e)
		// A proper prefix of an object (it lacks the closing brace) is never
		// valid JSON.
		return append(dst, full[:1+r.IntN(len(full)-1)]...)
	}},
	{ReasonMalformedJSON, func(dst []byte, e Event, _ *rand.Rand) []byte { // not an object
		dst = append(dst, '[')
		dst = strconv.AppendFloat(dst, e.Lat, 'f', -1, 64)
		dst = append(dst, ',')
		dst = strconv.AppendFloat(dst, e.Lon, 'f', -1, 64)
		return append(dst, ']')
	}},
	{ReasonMalformedJSON, func(dst []byte, e Event, _ *rand.Rand) []byte { // NaN is not JSON
		return fields(dst, e, "", "NaN", "", "")
	}},
	{ReasonMissingField, func(dst []byte, e Event, _ *rand.Rand) []byte {
		return fields(dst, e, "", "", "", "-") // no timestamp_ms
	}},
	{ReasonMissingField, func(dst []byte, e Event, _ *rand.Rand) []byte {
		return fields(dst, e, "", "null", "", "")
	}},
	{ReasonBadCourier, func(dst []byte, e Event, r *rand.Rand) []byte {
		bad := [...]string{`""`, `"van 3!"`, `"` + string(make65()) + `"`, `"caf\u00e9"`}
		return fields(dst, e, bad[r.IntN(len(bad))], "", "", "")
	}},
	{ReasonBadCourier, func(dst []byte, e Event, _ *rand.Rand) []byte {
		return fields(dst, e, "42", "", "", "")
	}},
	{ReasonBadCoords, func(dst []byte, e Event, r *rand.Rand) []byte {
		lat := 90 + 0.5 + 10*r.Float64()
		if r.IntN(2) == 0 {
			lat = -lat
		}
		return fields(dst, e, "", strconv.FormatFloat(roundTo(lat, 1e6), 'f', -1, 64), "", "")
	}},
	{ReasonBadCoords, func(dst []byte, e Event, _ *rand.Rand) []byte {
		return fields(dst, e, "", "", "1e999", "") // overflows float64: not finite
	}},
	{ReasonBadCoords, func(dst []byte, e Event, _ *rand.Rand) []byte {
		return fields(dst, e, "", `"`+strconv.FormatFloat(e.Lat, 'f', -1, 64)+`"`, "", "")
	}},
	{ReasonBadTimestamp, func(dst []byte, e Event, _ *rand.Rand) []byte {
		return fields(dst, e, "", "", "", strconv.FormatInt(e.TS, 10)+".5")
	}},
	{ReasonBadTimestamp, func(dst []byte, e Event, _ *rand.Rand) []byte {
		return fields(dst, e, "", "", "", strconv.FormatFloat(float64(e.TS), 'e', -1, 64))
	}},
	{ReasonBadTimestamp, func(dst []byte, e Event, r *rand.Rand) []byte {
		return fields(dst, e, "", "", "", [...]string{"0", "-1", "-" + strconv.FormatInt(e.TS, 10)}[r.IntN(3)])
	}},
	{ReasonBadTimestamp, func(dst []byte, e Event, _ *rand.Rand) []byte {
		return fields(dst, e, "", "", "", `"`+strconv.FormatInt(e.TS, 10)+`"`)
	}},
	{ReasonBadTimestamp, func(dst []byte, e Event, _ *rand.Rand) []byte {
		return fields(dst, e, "", "", "", "92233720368547758070") // beyond int64
	}},
	{ReasonTooLarge, func(dst []byte, e Event, _ *rand.Rand) []byte {
		dst = appendPosition(dst, e)
		dst = dst[:len(dst)-1]
		dst = append(dst, `,"pad":"`...)
		for range maxPayload {
			dst = append(dst, 'x')
		}
		return append(dst, `"}`...)
	}},
}

func make65() []byte {
	b := make([]byte, 65)
	for i := range b {
		b[i] = 'c'
	}
	return b
}

// fields writes e as a JSON object with some members replaced by raw JSON
// text: courier, lat, lon and timestamp ("" keeps e's value, "-" omits the
// member; only timestamp is ever omitted).
func fields(dst []byte, e Event, courier, lat, lon, ts string) []byte {
	dst = append(dst, '{')
	dst = append(dst, `"courier":`...)
	if courier == "" {
		dst = appendString(dst, e.Courier)
	} else {
		dst = append(dst, courier...)
	}
	dst = member(dst, `,"lat":`, lat, e.Lat)
	dst = member(dst, `,"lon":`, lon, e.Lon)
	switch ts {
	case "":
		dst = append(dst, `,"timestamp_ms":`...)
		dst = strconv.AppendInt(dst, e.TS, 10)
	case "-":
	default:
		dst = append(dst, `,"timestamp_ms":`...)
		dst = append(dst, ts...)
	}
	dst = append(dst, `,"accuracy_m":`...)
	dst = strconv.AppendFloat(dst, e.Accuracy, 'f', -1, 64)
	return append(dst, '}')
}

func member(dst []byte, name, raw string, v float64) []byte {
	dst = append(dst, name...)
	if raw != "" {
		return append(dst, raw...)
	}
	return strconv.AppendFloat(dst, v, 'f', -1, 64)
}
