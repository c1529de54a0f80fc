package tail

import (
	"fmt"
	"testing"
)

func TestBuffer_KeepsTheEnd(t *testing.T) {
	b := New(8)
	fmt.Fprint(b, "0123456789")
	fmt.Fprint(b, "ab")
	if got := b.String(); got != "456789ab" {
		t.Fatalf("got %q, want %q", got, "456789ab")
	}
}
