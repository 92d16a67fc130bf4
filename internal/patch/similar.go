package patch

import (
	"hash/maphash"
)

// chunkBits sets the average content-defined chunk to 1 KiB.
const chunkBits = 10

// minShare is the part of the new content that must be found in the old
// for a patch to be worth making.
const minShare = 4 // one in four bytes

// gear is the gear hash's table: fixed pseudo-random values (splitmix64
// from a fixed seed), so chunk boundaries are the same on every run.
var gear = func() (t [256]uint64) {
	x := uint64(0x5354524154410000) // "STRATA"
	for i := range t {
		x += 0x9e3779b97f4a7c15
		z := x
		z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
		z = (z ^ z>>27) * 0x94d049bb133111eb
		t[i] = z ^ z>>31
	}
	return t
}()

// chunks calls fn for each content-defined chunk of b: boundaries where a
// gear rolling hash (over about the last 64 bytes) has its top chunkBits
// bits zero, so an insertion moves only the chunks around it.
func chunks(b []byte, fn func([]byte)) {
	var h uint64
	start := 0
	for i, c := range b {
		h = h<<1 + gear[c]
		if i-start >= 64 && h>>(64-chunkBits) == 0 {
			fn(b[start : i+1])
			start, h = i+1, 0
		}
	}
	if start < len(b) {
		fn(b[start:])
	}
}

// Similar reports whether newContent shares enough with oldContent for a
// patch to be worth making: at least a quarter of it lies in
// content-defined chunks that old has too. It reads each content once,
// far cheaper than making a patch that would not pay.
func Similar(oldContent, newContent []byte) bool {
	seed := maphash.MakeSeed()
	have := make(map[uint64]struct{}, len(oldContent)>>chunkBits+1)
	chunks(oldContent, func(c []byte) { have[maphash.Bytes(seed, c)] = struct{}{} })
	shared := 0
	chunks(newContent, func(c []byte) {
		if _, ok := have[maphash.Bytes(seed, c)]; ok {
			shared += len(c)
		}
	})
	return shared*minShare >= len(newContent)
}
