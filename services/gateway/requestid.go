package gateway

// hexDigits writes v as len(dst) lowercase hex digits, zero-padded on the left.
func hexDigits(dst []byte, v uint64) {
	const digits = "0123456789abcdef"
	for i := len(dst) - 1; i >= 0; i-- {
		dst[i] = digits[v&0xf]
		v >>= 4
	}
}
