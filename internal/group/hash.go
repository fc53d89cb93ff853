package group

import (
	"math"
	"unicode/utf16"
)

// javaStringHashCode is Java's String.hashCode: s[0]*31^(n-1) + ... + s[n-1]
// over the string's UTF-16 code units, in wrapping int32 arithmetic. Kafka
// decodes group ids from UTF-8, so a Go string is first turned into runes
// (invalid bytes become U+FFFD, as Java's decoder does) and then into UTF-16
// (runes above U+FFFF become surrogate pairs).
func javaStringHashCode(s string) int32 {
	var h int32
	for _, u := range utf16.Encode([]rune(s)) {
		h = 31*h + int32(u)
	}
	return h
}

// javaAbs is Kafka's Utils.abs: the absolute value, except that MinInt32,
// which has none, maps to 0 (Math.abs would return MinInt32 itself).
func javaAbs(n int32) int32 {
	if n == math.MinInt32 {
		return 0
	}
	if n < 0 {
		return -n
	}
	return n
}

// partitionFor is Kafka's GroupCoordinator.partitionFor.
func partitionFor(groupID string, numPartitions int32) int32 {
	return javaAbs(javaStringHashCode(groupID)) % numPartitions
}
