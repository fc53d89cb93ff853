package schema

import "testing"

// The parse entry points take text from any client of the registry: they
// must return an error, never panic, on any input. The seed corpus runs in
// every `go test`; `go test -fuzz FuzzX ./internal/schema` searches further.

func addSeeds(f *testing.F, seeds ...string) {
	for _, s := range seeds {
		f.Add(s, s)
	}
}

func fuzzFormat(f *testing.F, format Format) {
	f.Fuzz(func(t *testing.T, oldText, newText string) {
		older := Schema{Format: format, Text: oldText}
		next := Schema{Format: format, Text: newText}
		_ = Parse(next, nil)
		_, _ = Canonical(next, nil)
		_, _ = Check(FullTransitive, next, []Schema{older}, nil)
	})
}

func FuzzAvro(f *testing.F) {
	addSeeds(f,
		avroRecord(`{"name":"id","type":"string"},{"name":"n","type":["null","int"],"default":null}`),
		`{"type":"enum","name":"E","symbols":["A","B"],"default":"A"}`,
		`{"type":"record","name":"Node","fields":[{"name":"next","type":["null","Node"]}]}`,
		`{"type":"array","items":{"type":"map","values":{"type":"fixed","name":"F","size":4}}}`,
		`["null","string",{"type":"bytes","logicalType":"decimal","precision":4,"scale":2}]`,
		`"long"`, `{`, ``,
	)
	f.Add(avroRecord(`{"name":"id","type":"string"}`), avroRecord(`{"name":"id","type":"int"}`))
	fuzzFormat(f, Avro)
}

func FuzzJSONSchema(f *testing.F) {
	addSeeds(f,
		jsonObject(`"a":{"type":"string"}`, `"additionalProperties":false,"required":["a"]`),
		`{"$defs":{"s":{"type":"string"}},"properties":{"a":{"$ref":"#/$defs/s"}}}`,
		`{"$defs":{"s":{"$ref":"#/$defs/s"}},"$ref":"#/$defs/s"}`,
		`{"oneOf":[{"type":"string","maxLength":3},{"type":"integer","multipleOf":2}]}`,
		`{"type":"array","items":{"enum":[1,"a",null]},"uniqueItems":true}`,
		`{"$ref":"http://example.com/x.json"}`,
		`true`, `{`, ``,
	)
	fuzzFormat(f, JSON)
}

func FuzzProtobuf(f *testing.F) {
	addSeeds(f,
		proto3(`message Order { string id = 1; oneof pay { string card = 2; string iban = 3; } map<string, int32> items = 4; }`),
		proto2(`message Order { required string id = 1; optional group G = 2 { optional int32 x = 3; } }`),
		proto3(`import "google/protobuf/any.proto"; message A { google.protobuf.Any a = 1; enum E { X = 0; } E e = 2; }`),
		proto3(`import "missing.proto";`),
		`syntax = "proto4";`, `message {`, ``,
	)
	fuzzFormat(f, Protobuf)
}
