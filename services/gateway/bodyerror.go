package gateway

import (
	"encoding/json"
	"errors"
	"reflect"
)

// bodyError turns a failure to decode a request body into the 400 a client can act on: which
// field has the wrong JSON type and what it must be, or where the JSON stops being JSON —
// instead of encoding/json's text, which names Go types ("gateway.body", "int64") the client
// never sees.
func bodyError(err error) *requestError {
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) {
		if typeErr.Field == "" {
			return badRequest("", "invalid_json", "the request body must be a JSON object, not a JSON %s", typeErr.Value)
		}
		return badRequest(typeErr.Field, "invalid_type", "%q must be %s, not a JSON %s",
			typeErr.Field, jsonKind(typeErr.Type), typeErr.Value)
	}
	var syntax *json.SyntaxError
	if errors.As(err, &syntax) {
		return badRequest("", "invalid_json", "the request body is not valid JSON at byte %d: %v", syntax.Offset, err)
	}
	return badRequest("", "invalid_json", "the request body is not a JSON object: %v", err)
}

// jsonKind names the JSON a Go field of type t accepts, in the words of the OpenAI API docs.
func jsonKind(t reflect.Type) string {
	if t == nil {
		return "a different JSON type"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean (true or false)"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "an integer between -9223372036854775808 and 9223372036854775807"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a non-negative integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	default:
		return "a different JSON type"
	}
}
