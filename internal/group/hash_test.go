package group

import (
	"math"
	"testing"
)

// The expected hashes are Java's String.hashCode, worked by hand for the
// short ones: "a" is 97; "hello" is
// ((((104*31+101)*31+108)*31+108)*31+111) = 99162322. The others were
// checked against an independent implementation of the same recurrence.
func TestJavaStringHashCode(t *testing.T) {
	for _, tc := range []struct {
		s    string
		hash int32
	}{
		{"", 0},
		{"a", 97},
		{"hello", 99162322},
		{"my-group", -1906497762},
		{"payment", -786681338},
		{"inventory", -2020599460},
		{"notification", 595233003},
		// The well-known string whose hash is Integer.MIN_VALUE.
		{"polygenelubricants", math.MinInt32},
		// Non-ASCII: one UTF-16 unit for ü, a surrogate pair for the emoji.
		{"grüppe", -1233264812},
		{"\U0001F600group", -1231696132},
	} {
		if got := javaStringHashCode(tc.s); got != tc.hash {
			t.Errorf("javaStringHashCode(%q) = %d, want %d", tc.s, got, tc.hash)
		}
	}
}

func TestHashPartition(t *testing.T) {
	c := NewCoordinator(DefaultConfig(), Deps{})
	for _, tc := range []struct {
		group string
		want  int32
	}{
		{"", 0},
		{"a", 47},        // 97 % 50
		{"hello", 22},    // 99162322 % 50
		{"my-group", 12}, // abs(-1906497762) % 50
		{"payment", 38},
		{"inventory", 10},
		{"notification", 3},
		{"console-consumer-12345", 6},
		// Utils.abs(MinInt32) is 0, where Math.abs would stay negative.
		{"polygenelubricants", 0},
	} {
		if got := c.HashPartition(tc.group); got != tc.want {
			t.Errorf("HashPartition(%q) = %d, want %d", tc.group, got, tc.want)
		}
	}
}
