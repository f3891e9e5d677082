package kvwire

import (
	"encoding/binary"
	"math"

	"github.com/sluicehq/sluice/state/kvevents"
)

// reader is a minimal, allocation-free msgpack reader over one payload. It
// understands exactly the msgpack types the engines emit and rejects
// anything truncated; container lengths are checked against the bytes left
// so a hostile length can never make the decoder allocate.
type reader struct {
	b   []byte
	off int
}

// maxDepth bounds nesting while skipping unknown values.
const maxDepth = 32

func (r *reader) left() int { return len(r.b) - r.off }

func (r *reader) malformed(what string) *kvevents.Error {
	return errf(kvevents.KindMalformed, "%s at byte %d", what, r.off)
}

func (r *reader) peek() (byte, bool) {
	if r.off >= len(r.b) {
		return 0, false
	}
	return r.b[r.off], true
}

func (r *reader) take(n int) ([]byte, bool) {
	if n < 0 || n > r.left() {
		return nil, false
	}
	s := r.b[r.off : r.off+n]
	r.off += n
	return s, true
}

func (r *reader) uintN(n int) (uint64, bool) {
	s, ok := r.take(n)
	if !ok {
		return 0, false
	}
	switch n {
	case 1:
		return uint64(s[0]), true
	case 2:
		return uint64(binary.BigEndian.Uint16(s)), true
	case 4:
		return uint64(binary.BigEndian.Uint32(s)), true
	default:
		return binary.BigEndian.Uint64(s), true
	}
}

// isNil consumes a nil if one is next.
func (r *reader) isNil() bool {
	if c, ok := r.peek(); ok && c == 0xc0 {
		r.off++
		return true
	}
	return false
}

// containerLen reads an array (wantMap false) or map header. Each element
// takes at least one byte (two per map entry), which bounds the length.
func (r *reader) containerLen(wantMap bool) (int, *kvevents.Error) {
	c, ok := r.peek()
	if !ok {
		return 0, r.malformed("unexpected end")
	}
	var n uint64
	switch {
	case !wantMap && c&0xf0 == 0x90:
		r.off++
		n = uint64(c & 0x0f)
	case wantMap && c&0xf0 == 0x80:
		r.off++
		n = uint64(c & 0x0f)
	case !wantMap && (c == 0xdc || c == 0xdd), wantMap && (c == 0xde || c == 0xdf):
		r.off++
		w := 2
		if c == 0xdd || c == 0xdf {
			w = 4
		}
		if n, ok = r.uintN(w); !ok {
			return 0, r.malformed("truncated length")
		}
	default:
		if wantMap {
			return 0, r.malformed("want map")
		}
		return 0, r.malformed("want array")
	}
	per := uint64(1)
	if wantMap {
		per = 2
	}
	if n*per > uint64(r.left()) {
		return 0, r.malformed("length beyond payload")
	}
	return int(n), nil
}

func (r *reader) arrayLen() (int, *kvevents.Error) { return r.containerLen(false) }
func (r *reader) mapLen() (int, *kvevents.Error)   { return r.containerLen(true) }

// isArray and isMap report the type of the next value without consuming it.
func (r *reader) isArray() bool {
	c, ok := r.peek()
	return ok && (c&0xf0 == 0x90 || c == 0xdc || c == 0xdd)
}

func (r *reader) isMap() bool {
	c, ok := r.peek()
	return ok && (c&0xf0 == 0x80 || c == 0xde || c == 0xdf)
}

// str reads a str (or bin) and returns a view into the payload.
func (r *reader) str() ([]byte, *kvevents.Error) {
	c, ok := r.peek()
	if !ok {
		return nil, r.malformed("unexpected end")
	}
	var n uint64
	switch {
	case c&0xe0 == 0xa0:
		r.off++
		n = uint64(c & 0x1f)
	case c == 0xd9 || c == 0xc4:
		r.off++
		n, ok = r.uintN(1)
	case c == 0xda || c == 0xc5:
		r.off++
		n, ok = r.uintN(2)
	case c == 0xdb || c == 0xc6:
		r.off++
		n, ok = r.uintN(4)
	default:
		return nil, r.malformed("want string")
	}
	if !ok {
		return nil, r.malformed("truncated length")
	}
	s, ok := r.take(int(min(n, math.MaxInt32)))
	if !ok || n > math.MaxInt32 {
		return nil, r.malformed("string beyond payload")
	}
	return s, nil
}

// isStr reports whether the next value is a str.
func (r *reader) isStr() bool {
	c, ok := r.peek()
	return ok && (c&0xe0 == 0xa0 || c == 0xd9 || c == 0xda || c == 0xdb)
}

// integer reads any msgpack integer. It returns the value as a uint64 bit
// pattern and whether the encoding was signed and negative.
func (r *reader) integer() (v uint64, neg bool, ok bool) {
	c, has := r.peek()
	if !has {
		return 0, false, false
	}
	switch {
	case c <= 0x7f:
		r.off++
		return uint64(c), false, true
	case c >= 0xe0:
		r.off++
		return uint64(int64(int8(c))), true, true
	case c >= 0xcc && c <= 0xcf:
		r.off++
		v, ok = r.uintN(1 << (c - 0xcc))
		return v, false, ok
	case c >= 0xd0 && c <= 0xd3:
		r.off++
		w := 1 << (c - 0xd0)
		u, ok := r.uintN(w)
		if !ok {
			return 0, false, false
		}
		var s int64
		switch w {
		case 1:
			s = int64(int8(u))
		case 2:
			s = int64(int16(u))
		case 4:
			s = int64(int32(u))
		default:
			s = int64(u)
		}
		return uint64(s), s < 0, true
	}
	return 0, false, false
}

// isInt reports whether the next value is an integer.
func (r *reader) isInt() bool {
	c, ok := r.peek()
	return ok && (c <= 0x7f || c >= 0xe0 || (c >= 0xcc && c <= 0xd3))
}

// number reads an integer or a float as float64.
func (r *reader) number() (float64, bool) {
	c, ok := r.peek()
	if !ok {
		return 0, false
	}
	switch c {
	case 0xca:
		r.off++
		u, ok := r.uintN(4)
		return float64(math.Float32frombits(uint32(u))), ok
	case 0xcb:
		r.off++
		u, ok := r.uintN(8)
		return math.Float64frombits(u), ok
	}
	v, neg, ok := r.integer()
	if neg {
		return float64(int64(v)), ok
	}
	return float64(v), ok
}

// skip consumes one value of any type.
func (r *reader) skip() *kvevents.Error { return r.skipDepth(0) }

func (r *reader) skipDepth(depth int) *kvevents.Error {
	if depth > maxDepth {
		return r.malformed("nesting too deep")
	}
	c, ok := r.peek()
	if !ok {
		return r.malformed("unexpected end")
	}
	var fixed int // bytes after the type byte
	switch {
	case c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3:
		r.off++
		return nil
	case c&0xe0 == 0xa0, c == 0xd9, c == 0xda, c == 0xdb, c == 0xc4, c == 0xc5, c == 0xc6:
		_, err := r.str()
		return err
	case c&0xf0 == 0x90, c == 0xdc, c == 0xdd:
		n, err := r.arrayLen()
		if err != nil {
			return err
		}
		for i := 0; i < n; i++ {
			if err := r.skipDepth(depth + 1); err != nil {
				return err
			}
		}
		return nil
	case c&0xf0 == 0x80, c == 0xde, c == 0xdf:
		n, err := r.mapLen()
		if err != nil {
			return err
		}
		for i := 0; i < 2*n; i++ {
			if err := r.skipDepth(depth + 1); err != nil {
				return err
			}
		}
		return nil
	case c == 0xcc || c == 0xd0:
		fixed = 1
	case c == 0xcd || c == 0xd1:
		fixed = 2
	case c == 0xce || c == 0xd2 || c == 0xca:
		fixed = 4
	case c == 0xcf || c == 0xd3 || c == 0xcb:
		fixed = 8
	case c == 0xd4:
		fixed = 2
	case c == 0xd5:
		fixed = 3
	case c == 0xd6:
		fixed = 5
	case c == 0xd7:
		fixed = 9
	case c == 0xd8:
		fixed = 17
	case c == 0xc7 || c == 0xc8 || c == 0xc9: // ext 8/16/32: length, type, data
		r.off++
		n, ok := r.uintN(1 << (c - 0xc7))
		if !ok || n+1 > uint64(r.left()) {
			return r.malformed("ext beyond payload")
		}
		r.off += int(n) + 1
		return nil
	default: // 0xc1 is never used
		return r.malformed("invalid type byte")
	}
	r.off++
	if _, ok := r.take(fixed); !ok {
		return r.malformed("truncated value")
	}
	return nil
}
