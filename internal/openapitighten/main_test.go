package main

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// A miniature of protoc-gen-openapiv2's output: one body with a required field, one without,
// a nested message, a free-form Struct, a map, an int64 query parameter and a uint64 field.
const plugin = `{
  "paths": {
    "/v1/things": {
      "post": {
        "parameters": [
          {"name": "body", "in": "body", "required": true, "schema": {"$ref": "#/definitions/v1CreateRequest"}},
          {"name": "basedOnVersion", "in": "query", "required": false, "type": "string", "format": "int64"}
        ]
      }
    },
    "/v1/things/{id}:drain": {
      "post": {
        "parameters": [
          {"name": "body", "in": "body", "required": true, "schema": {"$ref": "#/definitions/DrainBody"}}
        ]
      }
    }
  },
  "definitions": {
    "v1CreateRequest": {
      "type": "object",
      "properties": {
        "thing": {"$ref": "#/definitions/v1Thing"},
        "doc": {"type": "object"}
      },
      "required": ["thing"]
    },
    "v1Thing": {
      "type": "object",
      "properties": {
        "size": {"type": "string", "format": "uint64"},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "count": {"type": "string", "format": "int64", "pattern": "^[0-9]+$"}
      }
    },
    "DrainBody": {"type": "object", "properties": {"basedOnVersion": {"type": "string", "format": "int64"}}},
    "v1Response": {"type": "object", "properties": {"version": {"type": "string", "format": "int64"}}}
  }
}`

func TestTighten(t *testing.T) {
	out, err := tighten([]byte(plugin))
	if err != nil {
		t.Fatal(err)
	}
	var got, want any
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	const tightened = `{
  "paths": {
    "/v1/things": {"post": {"parameters": [
      {"name": "body", "in": "body", "required": true, "schema": {"$ref": "#/definitions/v1CreateRequest"}},
      {"name": "basedOnVersion", "in": "query", "required": false, "type": "string", "format": "int64", "pattern": "^-?[0-9]{1,18}$"}
    ]}},
    "/v1/things/{id}:drain": {"post": {"parameters": [
      {"name": "body", "in": "body", "required": false, "schema": {"$ref": "#/definitions/DrainBody"}}
    ]}}
  },
  "definitions": {
    "v1CreateRequest": {"type": "object", "properties": {"thing": {"$ref": "#/definitions/v1Thing"}, "doc": {"type": "object"}},
      "additionalProperties": false, "required": ["thing"]},
    "v1Thing": {"type": "object", "properties": {
        "size": {"type": "string", "format": "uint64", "pattern": "^[0-9]{1,18}$"},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "count": {"type": "string", "format": "int64", "pattern": "^[0-9]+$"}
      }, "additionalProperties": false},
    "DrainBody": {"type": "object", "properties": {"basedOnVersion": {"type": "string", "format": "int64", "pattern": "^-?[0-9]{1,18}$"}},
      "additionalProperties": false},
    "v1Response": {"type": "object", "properties": {"version": {"type": "string", "format": "int64", "pattern": "^-?[0-9]{1,18}$"}}}
  }
}`
	if err := json.Unmarshal([]byte(tightened), &want); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("tighten mismatch (-want +got):\n%s", diff)
	}
	// Rewriting its own output changes nothing, so make generate is stable.
	again, err := tighten(out)
	if err != nil {
		t.Fatal(err)
	}
	if string(again) != string(out) {
		t.Errorf("tighten is not idempotent:\n%s\nthen\n%s", out, again)
	}
}

func TestTightenKeepsKeyOrder(t *testing.T) {
	in := `{"paths": {}, "definitions": {"b": {"type": "string", "format": "int64", "description": "d"}, "a": {}}, "info": {"z": 1, "y": 2}}`
	out, err := tighten([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	want := `{
  "paths": {},
  "definitions": {
    "b": {
      "type": "string",
      "format": "int64",
      "pattern": "^-?[0-9]{1,18}$",
      "description": "d"
    },
    "a": {}
  },
  "info": {
    "z": 1,
    "y": 2
  }
}
`
	if diff := cmp.Diff(want, string(out)); diff != "" {
		t.Errorf("tighten mismatch (-want +got):\n%s", diff)
	}
}
