package position

import (
	"encoding/json"
	"strconv"
)

// This file is the OwnTracks format (contract §2, Input formats): what the
// OwnTracks app publishes in MQTT mode to owntracks/USER/DEVICE, read with
// the same scanner as the edgeproc format.

// Format is how a payload becomes a position (mqtt.format).
type Format uint8

const (
	// FormatEdgeproc is the contract's own JSON object (Decode).
	FormatEdgeproc Format = iota
	// FormatOwnTracks is the OwnTracks app's messages (DecodeOwnTracks).
	FormatOwnTracks
)

// String returns the format's config name.
func (f Format) String() string {
	if f == FormatOwnTracks {
		return "owntracks"
	}
	return "edgeproc"
}

// ParseFormat maps a config name ("edgeproc", "owntracks") to its Format.
func ParseFormat(s string) (Format, bool) {
	switch s {
	case "edgeproc":
		return FormatEdgeproc, true
	case "owntracks":
		return FormatOwnTracks, true
	}
	return FormatEdgeproc, false
}

// MessageType is the _type of an OwnTracks message that is not a position,
// as counted: the types the OwnTracks JSON documentation lists by name,
// anything else (a misspelt or future type, a _type that is not a string)
// as MsgOther, so that the label values stay bounded.
type MessageType uint8

// OwnTracks message types other than location.
const (
	MsgOther MessageType = iota
	MsgBeacon
	MsgCard
	MsgCmd
	MsgConfiguration
	MsgEncrypted
	MsgLWT
	MsgRequest
	MsgStatus
	MsgSteps
	MsgTransition
	MsgWaypoint
	MsgWaypoints
)

// MessageTypes lists every MessageType, for metrics and summaries. Treat
// it as read-only.
var MessageTypes = [...]MessageType{
	MsgBeacon, MsgCard, MsgCmd, MsgConfiguration, MsgEncrypted, MsgLWT, MsgRequest,
	MsgStatus, MsgSteps, MsgTransition, MsgWaypoint, MsgWaypoints, MsgOther,
}

var messageTypeText = [...]string{
	MsgOther:         "other",
	MsgBeacon:        "beacon",
	MsgCard:          "card",
	MsgCmd:           "cmd",
	MsgConfiguration: "configuration",
	MsgEncrypted:     "encrypted",
	MsgLWT:           "lwt",
	MsgRequest:       "request",
	MsgStatus:        "status",
	MsgSteps:         "steps",
	MsgTransition:    "transition",
	MsgWaypoint:      "waypoint",
	MsgWaypoints:     "waypoints",
}

// String returns the _type ("lwt", ...) or "other".
func (t MessageType) String() string {
	if int(t) < len(messageTypeText) {
		return messageTypeText[t]
	}
	return "type(" + strconv.Itoa(int(t)) + ")"
}

// messageType maps an unescaped _type string to its MessageType.
func messageType(s []byte) MessageType {
	for t := MsgBeacon; int(t) < len(messageTypeText); t++ {
		if string(s) == messageTypeText[t] {
			return t
		}
	}
	return MsgOther
}

// MaxTst is the largest OwnTracks tst accepted, in seconds: MaxTimestamp
// (9999-12-31T23:59:59.999Z) rounded down to a whole second.
const MaxTst = MaxTimestamp / 1000

// DecodeOwnTracks fills p from an OwnTracks payload and returns OK,
// Ignored (an OwnTracks message that is not a location; p.Type says
// which) or the first rejection reason, in the contract's order read on
// OwnTracks' fields: TooLarge, MalformedJSON, MissingField (_type, then
// lat, lon, tst; p.Missing names it), BadCourier, BadCoordinates,
// BadTimestamp. _type is read right after the JSON is validated: a
// message of another type is Ignored whatever else it holds.
//
// A location's lat and lon are read as Decode reads them; tst, an integer
// number of seconds in (0, MaxTst], gives p.TS = tst × 1000; acc, when a
// finite number >= 0, is p.Accuracy. Every other member is ignored. The
// courier, lat, lon and p.TS are then held to Check, as in Decode, and
// p is as Decode leaves it on rejection.
//
// The courier is a level of the topic: the one matched by '+' number
// level (0-based: 0 is USER in owntracks/+/+, 1 is DEVICE) of the
// subscription filter, and it must be a valid courier id (BadCourier if
// it is not, or if the topic does not match the filter). topic is the
// MQTT topic the payload arrived on; when it is empty (a replay line) the
// payload's own "topic" member, a JSON string, is read instead, as
// OwnTracks' HTTP mode sends it. There is no CourierMismatch in this
// format.
//
// Like Decode it never panics and does not allocate, except to parse an
// unusual number literal (see Decode) or a replay line's topic that has
// both escapes and bytes outside ASCII.
func (d *Decoder) DecodeOwnTracks(payload []byte, topic, filter string, level int, p *Position) Reason {
	*p = Position{Accuracy: -1}
	if len(payload) > MaxPayload {
		return TooLarge
	}
	var f fieldSpans
	if !d.scanTop(payload, &f) {
		return MalformedJSON
	}
	readArrival(payload, &f, p)

	t := f[fieldType].of(payload)
	if t == nil || t[0] == 'n' {
		p.Missing = "_type"
		return MissingField
	}
	if !isLocation(t) {
		p.Type = MsgOther
		if t[0] == '"' {
			var buf [len("configuration")]byte
			if n, ok := unescapeASCII(buf[:], t[1:len(t)-1]); ok {
				p.Type = messageType(buf[:n])
			}
		}
		return Ignored
	}
	for _, k := range [...]struct {
		f    field
		name string
	}{{fieldLat, "lat"}, {fieldLon, "lon"}, {fieldTst, "tst"}} {
		if v := f[k.f].of(payload); v == nil || v[0] == 'n' {
			p.Missing = k.name
			return MissingField
		}
	}

	var c []byte
	var ok bool
	if topic != "" {
		var lv string
		if lv, ok = TopicLevel(filter, topic, level); ok && len(lv) <= maxCourier {
			c = d.courier[:copy(d.courier[:], lv)]
		}
	} else if tv := d.payloadTopic(f[fieldTopic].of(payload)); tv != nil {
		c, ok = TopicLevel(filter, tv, level)
	}
	if ok {
		p.Courier = c
	}
	p.Lat = coordinate(f[fieldLat].of(payload))
	p.Lon = coordinate(f[fieldLon].of(payload))
	if tst := f[fieldTst].of(payload); isNumber(tst) {
		if s, ok := parseInt(tst); ok && s > 0 && s <= MaxTst {
			p.TS = s * 1000 // else 0, which Check refuses
		}
	}
	if r := Check(p); r != OK {
		rejected(p)
		return r
	}

	if a, ok := parseFinite(f[fieldAcc].of(payload)); ok && a >= 0 {
		p.Accuracy = a
	}
	return OK
}

// isLocation reports whether v, a validated JSON value, is the string
// "location" (escapes allowed).
func isLocation(v []byte) bool {
	if string(v) == `"location"` {
		return true
	}
	if v[0] != '"' || !hasBackslash(v) {
		return false
	}
	var buf [len("location") + 1]byte
	n, ok := unescapeASCII(buf[:], v[1:len(v)-1])
	return ok && string(buf[:n]) == "location"
}

// payloadTopic returns the unescaped contents of v, a replay line's
// "topic" value, or nil when v is absent or not a string. Without escapes
// it aliases the payload; with escapes it is d.topic, or a new slice when
// the topic has bytes outside ASCII (encoding/json then decodes it, so
// that it reads as the reference decoder reads it).
func (d *Decoder) payloadTopic(v []byte) []byte {
	if len(v) < 2 || v[0] != '"' {
		return nil
	}
	s := v[1 : len(v)-1]
	if !hasBackslash(s) {
		return s
	}
	if n, ok := unescapeASCII(d.topic[:], s); ok {
		return d.topic[:n]
	}
	var str string
	if json.Unmarshal(v, &str) != nil {
		return nil
	}
	return []byte(str)
}
