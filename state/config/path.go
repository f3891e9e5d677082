package config

import (
	"strconv"
	"strings"
)

// Path construction. Identifier-like keys join with '.', other map keys and
// indexes use brackets: buckets[1].groups.pd, models["org/model"].
func join(path, key string) string {
	if !isIdent(key) {
		return mapKey(path, key)
	}
	if path == "" {
		return key
	}
	return path + "." + key
}

func mapKey(path, key string) string { return path + "[" + strconv.Quote(key) + "]" }

func index(path string, i int) string { return path + "[" + strconv.Itoa(i) + "]" }

func identRune(c rune) bool {
	return c == '_' || c == '-' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

func isIdent(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if !identRune(c) {
			return false
		}
	}
	return true
}

// parentPath strips the last segment of a path built by join, mapKey or
// index. A quoted key cannot contain `["` unescaped, so the last `["` starts
// the final segment when the path ends in `"]`.
func parentPath(path string) string {
	switch {
	case strings.HasSuffix(path, `"]`):
		return path[:strings.LastIndex(path, `["`)]
	case strings.HasSuffix(path, "]"):
		return path[:strings.LastIndex(path, "[")]
	}
	if i := strings.LastIndex(path, "."); i >= 0 {
		return path[:i]
	}
	return ""
}
