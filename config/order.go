package config

import (
	"slices"
	"unicode/utf16"
)

// clusterPairs returns every ordered pair (s,t), s != t, in the order of
// MM2's MirrorMakerConfig.clusterPairs: a double loop over
// new HashSet<>(clusters). The pairs are returned whether or not MM2 would
// start a herder for them.
func clusterPairs(aliases []string) [][2]string {
	order := javaHashSetOrder(aliases)
	var out [][2]string
	for _, s := range order {
		for _, t := range order {
			if s != t {
				out = append(out, [2]string{s, t})
			}
		}
	}
	return out
}

// javaHashSetOrder returns the iteration order of
// new java.util.HashSet<>(Arrays.asList(items)) for distinct items: buckets
// in index order, each bucket in insertion order, with the table size
// tableSizeFor(max(n/0.75+1, 16)) that HashSet's copy constructor picks. It
// is exact unless nine or more aliases share a bucket (HashMap then resizes
// or builds a tree bin), which no real configuration reaches.
func javaHashSetOrder(items []string) []string {
	capacity := tableSizeFor(max(int(float32(len(items))/0.75)+1, 16))
	hashes := make([]uint32, len(items))
	for i, s := range items {
		hashes[i] = javaSpread(javaStringHash(s))
	}
	idx := make([]int, len(items))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		ba, bb := hashes[a]&uint32(capacity-1), hashes[b]&uint32(capacity-1)
		switch {
		case ba < bb:
			return -1
		case ba > bb:
			return 1
		}
		return a - b
	})
	out := make([]string, len(items))
	for i, j := range idx {
		out[i] = items[j]
	}
	return out
}

// javaStringHash is java.lang.String.hashCode over UTF-16 code units.
func javaStringHash(s string) int32 {
	var h int32
	for _, u := range utf16.Encode([]rune(s)) {
		h = 31*h + int32(u)
	}
	return h
}

// javaSpread is HashMap.hash: h ^ (h >>> 16).
func javaSpread(h int32) uint32 {
	u := uint32(h)
	return u ^ (u >> 16)
}

// tableSizeFor is HashMap.tableSizeFor: the next power of two >= c.
func tableSizeFor(c int) int {
	n := 1
	for n < c {
		n *= 2
	}
	return n
}
