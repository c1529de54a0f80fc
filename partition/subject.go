package partition

// appendMQTTTopic appends to b the MQTT topic that nats-server's MQTT
// gateway maps to the NATS subject s: '.' separates levels ('/' in MQTT),
// and "//" is a '.' inside a level. The engine checks the courier of a
// payload against the topic's last level, as for an MQTT source.
func appendMQTTTopic[T string | []byte](b []byte, s T) []byte {
	for i := 0; i < len(s); i++ {
		switch {
		case s[i] == '/' && i+1 < len(s) && s[i+1] == '/':
			b = append(b, '.')
			i++
		case s[i] == '.':
			b = append(b, '/')
		default:
			b = append(b, s[i])
		}
	}
	return b
}

// natsToMQTT is appendMQTTTopic for a string.
func natsToMQTT(s string) string { return string(appendMQTTTopic(nil, s)) }
