package tmath

import "testing"

func TestAdd(t *testing.T) {
	cases := []struct{ a, b, want int64 }{
		{1, 2, 3},
		{Forever, 1, Forever},
		{Forever - 5, 10, Forever},
		{Never, -1, Never},
		{Never, 10, Never + 10},
		{-5, -3, -8},
	}
	for _, c := range cases {
		if got := Add(c.a, c.b); got != c.want {
			t.Errorf("Add(%d, %d) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
}

func TestFloorDiv(t *testing.T) {
	cases := []struct{ a, b, want int64 }{
		{7, 2, 3}, {-7, 2, -4}, {-8, 2, -4}, {0, 5, 0}, {-1, 60000, -1}, {Never, 1000, Never/1000 - 1},
	}
	for _, c := range cases {
		if got := FloorDiv(c.a, c.b); got != c.want {
			t.Errorf("FloorDiv(%d, %d) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
}

func TestGCD(t *testing.T) {
	if got := GCD(300000, 60000); got != 60000 {
		t.Errorf("GCD(5m, 1m) = %d, want 60000", got)
	}
	if got := GCD(300000, 70000); got != 10000 {
		t.Errorf("GCD(5m, 70s) = %d, want 10000", got)
	}
}
