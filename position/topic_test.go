package position

import "testing"

func TestTopicCourier(t *testing.T) {
	tests := []struct {
		filter, topic string
		want          string
		wantOK        bool
	}{
		{"km0/girona/positions/+", "km0/girona/positions/van-3", "van-3", true},
		{"km0/girona/positions/+", "km0/girona/positions/", "", true},
		{"km0/girona/positions/+", "km0/girona/positions", "", false},
		{"km0/girona/positions/+", "km0/girona/positions/van-3/extra", "", false},
		{"km0/girona/positions/+", "km0/barcelona/positions/van-3", "", false},
		{"km0/+/positions/+", "km0/girona/positions/van-3", "van-3", true},
		{"km0/+/positions/+/gps", "km0/girona/positions/van-3/gps", "van-3", true},
		{"km0/+/positions/+/gps", "km0/girona/positions/van-3/obd", "", false},
		{"km0/+/positions", "km0/girona/positions", "girona", true},
		{"km0/girona/positions/+/#", "km0/girona/positions/van-3", "van-3", true},
		{"km0/girona/positions/+/#", "km0/girona/positions/van-3/a/b", "van-3", true},
		{"km0/girona/#", "km0/girona/positions/van-3", "", false},
		{"km0/girona/positions/van-3", "km0/girona/positions/van-3", "", false},
		{"km0/#/+", "km0/a/b", "", false},
		{"+", "van-3", "van-3", true},
		{"+", "$SYS/van-3", "", false},
		{"+/+", "$SYS/van-3", "", false},
		{"$share/group/km0/girona/positions/+", "km0/girona/positions/van-3", "van-3", true},
		{"$share/group", "group", "", false},
		{"", "", "", false},
	}
	for _, tt := range tests {
		got, ok := TopicCourier(tt.filter, tt.topic)
		if got != tt.want || ok != tt.wantOK {
			t.Errorf("TopicCourier(%q, %q) = %q, %v; want %q, %v", tt.filter, tt.topic, got, ok, tt.want, tt.wantOK)
		}
	}
}

func TestCheckTopic(t *testing.T) {
	const filter = "km0/girona/positions/+"
	tests := []struct {
		filter, topic, courier string
		want                   Reason
	}{
		{filter, "km0/girona/positions/van-3", "van-3", OK},
		{filter, "km0/girona/positions/van-4", "van-3", CourierMismatch},
		{filter, "km0/girona/positions/VAN-3", "van-3", CourierMismatch},
		{filter, "km0/girona/positions/", "van-3", CourierMismatch},
		{"km0/girona/positions", "km0/girona/positions", "van-3", OK},
		{"km0/girona/#", "km0/girona/positions/van-4", "van-3", OK},
		{filter, "other/topic", "van-3", OK},
	}
	for _, tt := range tests {
		p := &Position{Courier: []byte(tt.courier)}
		if got := CheckTopic(tt.filter, tt.topic, p); got != tt.want {
			t.Errorf("CheckTopic(%q, %q, courier %q) = %v, want %v", tt.filter, tt.topic, tt.courier, got, tt.want)
		}
	}
}

func TestCheckTopic_NoAllocs(t *testing.T) {
	p := &Position{Courier: []byte("van-3")}
	n := testing.AllocsPerRun(100, func() {
		CheckTopic("$share/g/km0/girona/positions/+", "km0/girona/positions/van-3", p)
	})
	if n != 0 {
		t.Errorf("CheckTopic allocates %v times per run, want 0", n)
	}
}
