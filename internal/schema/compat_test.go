package schema

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// types returns the error types of found, in order.
func types(found []Incompatibility) []string {
	out := make([]string, 0, len(found))
	for _, f := range found {
		out = append(out, f.Type)
	}
	return out
}

type compatCase struct {
	name     string
	old, new string
	level    Level
	// want lists the error types expected, in order; empty means compatible.
	want []string
}

func runCompat(t *testing.T, format Format, cases []compatCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			found, err := Check(tc.level, Schema{Format: format, Text: tc.new}, []Schema{{Format: format, Text: tc.old}}, nil)
			if err != nil {
				t.Fatalf("Check: %v", err)
			}
			got := types(found)
			if strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Fatalf("got %v, want %v; details: %v", got, tc.want, found)
			}
		})
	}
}

func avroRecord(fields string) string {
	return `{"type":"record","name":"Order","namespace":"shop","fields":[` + fields + `]}`
}

func TestAvroCompatibility(t *testing.T) {
	id := `{"name":"id","type":"string"}`
	runCompat(t, Avro, []compatCase{
		{"identical", avroRecord(id), avroRecord(id), FullTransitive, nil},
		{"optional field with default added, backward", avroRecord(id), avroRecord(id + `,{"name":"note","type":["null","string"],"default":null}`), Backward, nil},
		{"optional field with default added, full", avroRecord(id), avroRecord(id + `,{"name":"note","type":["null","string"],"default":null}`), Full, nil},
		{"field without default added, backward", avroRecord(id), avroRecord(id + `,{"name":"qty","type":"int"}`), Backward, []string{avroMissingDefault}},
		{"field without default added, forward", avroRecord(id), avroRecord(id + `,{"name":"qty","type":"int"}`), Forward, nil},
		{"required field removed, backward", avroRecord(id + `,{"name":"qty","type":"int"}`), avroRecord(id), Backward, nil},
		{"required field removed, forward", avroRecord(id + `,{"name":"qty","type":"int"}`), avroRecord(id), Forward, []string{avroMissingDefault}},
		{"required field removed, full", avroRecord(id + `,{"name":"qty","type":"int"}`), avroRecord(id), Full, []string{avroMissingDefault}},
		{"renamed without alias", avroRecord(id), avroRecord(`{"name":"orderId","type":"string"}`), Backward, []string{avroMissingDefault}},
		{"renamed with alias", avroRecord(id), avroRecord(`{"name":"orderId","aliases":["id"],"type":"string"}`), Backward, nil},
		{"record renamed", avroRecord(id), `{"type":"record","name":"Purchase","namespace":"shop","fields":[` + id + `]}`, Backward, []string{avroNameMismatch}},
		{"record renamed with alias", avroRecord(id), `{"type":"record","name":"Purchase","namespace":"shop","aliases":["shop.Order"],"fields":[` + id + `]}`, Backward, nil},
		{"int to long", avroRecord(`{"name":"n","type":"int"}`), avroRecord(`{"name":"n","type":"long"}`), Backward, nil},
		{"long to float", avroRecord(`{"name":"n","type":"long"}`), avroRecord(`{"name":"n","type":"float"}`), Backward, nil},
		{"float to double", avroRecord(`{"name":"n","type":"float"}`), avroRecord(`{"name":"n","type":"double"}`), Backward, nil},
		{"int to double", avroRecord(`{"name":"n","type":"int"}`), avroRecord(`{"name":"n","type":"double"}`), Backward, nil},
		{"long to int", avroRecord(`{"name":"n","type":"long"}`), avroRecord(`{"name":"n","type":"int"}`), Backward, []string{avroTypeMismatch}},
		{"int to long, forward", avroRecord(`{"name":"n","type":"int"}`), avroRecord(`{"name":"n","type":"long"}`), Forward, []string{avroTypeMismatch}},
		{"string to bytes", avroRecord(`{"name":"n","type":"string"}`), avroRecord(`{"name":"n","type":"bytes"}`), Full, nil},
		{"string to int", avroRecord(`{"name":"n","type":"string"}`), avroRecord(`{"name":"n","type":"int"}`), Backward, []string{avroTypeMismatch}},
		{"enum symbol added, backward", `{"type":"enum","name":"E","symbols":["A","B"]}`, `{"type":"enum","name":"E","symbols":["A","B","C"]}`, Backward, nil},
		{"enum symbol added, forward", `{"type":"enum","name":"E","symbols":["A","B"]}`, `{"type":"enum","name":"E","symbols":["A","B","C"]}`, Forward, []string{avroMissingSymbols}},
		{"enum symbol removed, backward", `{"type":"enum","name":"E","symbols":["A","B"]}`, `{"type":"enum","name":"E","symbols":["A"]}`, Backward, []string{avroMissingSymbols}},
		{"enum symbol removed, reader default", `{"type":"enum","name":"E","symbols":["A","B"]}`, `{"type":"enum","name":"E","symbols":["A"],"default":"A"}`, Backward, nil},
		{"fixed size changed", `{"type":"fixed","name":"F","size":4}`, `{"type":"fixed","name":"F","size":8}`, Backward, []string{avroFixedSizeMismatch}},
		{"union branch removed", avroRecord(`{"name":"n","type":["null","string","int"]}`), avroRecord(`{"name":"n","type":["null","string"]}`), Backward, []string{avroMissingBranch}},
		{"union branch added", avroRecord(`{"name":"n","type":["null","string"]}`), avroRecord(`{"name":"n","type":["null","string","int"]}`), Backward, nil},
		{"type to union holding it", avroRecord(`{"name":"n","type":"string"}`), avroRecord(`{"name":"n","type":["null","string"]}`), Backward, nil},
		{"union to one of its types", avroRecord(`{"name":"n","type":["null","string"]}`), avroRecord(`{"name":"n","type":"string"}`), Backward, []string{avroTypeMismatch}},
		{"array items promoted", `{"type":"array","items":"int"}`, `{"type":"array","items":"long"}`, Backward, nil},
		{"map values changed", `{"type":"map","values":"int"}`, `{"type":"map","values":"string"}`, Backward, []string{avroTypeMismatch}},
		{"recursive record", `{"type":"record","name":"Node","fields":[{"name":"next","type":["null","Node"]}]}`,
			`{"type":"record","name":"Node","fields":[{"name":"next","type":["null","Node"]},{"name":"v","type":"int","default":0}]}`, FullTransitive, nil},
		{"none accepts anything", avroRecord(id), `"int"`, None, nil},
	})
}

// TestAvroMessages holds the descriptions to Confluent's wording, which
// clients and operators match on.
func TestAvroMessages(t *testing.T) {
	old := avroRecord(`{"name":"id","type":"string"},{"name":"price","type":"double"}`)
	next := avroRecord(`{"name":"id","type":"string"},{"name":"price","type":"string"},{"name":"warehouseId","type":"string"}`)
	found, err := Check(Backward, Schema{Text: next}, []Schema{{Text: old}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"{errorType:'TYPE_MISMATCH', description:'The type (path '/fields/1/type') of a field in the new schema does not match with the old schema', additionalInfo:'reader type: STRING not compatible with writer type: DOUBLE'}",
		"{errorType:'READER_FIELD_MISSING_DEFAULT_VALUE', description:'The field 'warehouseId' at path '/fields/2' in the new schema has no default value and is missing in the old schema', additionalInfo:'warehouseId'}",
	}
	if len(found) != len(want) {
		t.Fatalf("got %d incompatibilities, want %d: %v", len(found), len(want), found)
	}
	for i := range want {
		if found[i].String() != want[i] {
			t.Errorf("incompatibility %d:\n got %s\nwant %s", i, found[i], want[i])
		}
	}
}

func jsonObject(props string, extra string) string {
	s := `{"type":"object","properties":{` + props + `}`
	if extra != "" {
		s += "," + extra
	}
	return s + "}"
}

func TestJSONSchemaCompatibility(t *testing.T) {
	a := `"a":{"type":"string"}`
	b := `"b":{"type":"integer"}`
	closed := `"additionalProperties":false`
	runCompat(t, JSON, []compatCase{
		{"identical", jsonObject(a, ""), jsonObject(a, ""), FullTransitive, nil},
		{"property added to open content model", jsonObject(a, ""), jsonObject(a+","+b, ""), Backward, []string{"PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL"}},
		{"property removed from open content model", jsonObject(a+","+b, ""), jsonObject(a, ""), Backward, nil},
		{"optional property added to closed content model", jsonObject(a, closed), jsonObject(a+","+b, closed), Backward, nil},
		{"property removed from closed content model", jsonObject(a+","+b, closed), jsonObject(a, closed), Backward, []string{"PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL"}},
		{"property removed from closed content model, forward", jsonObject(a+","+b, closed), jsonObject(a, closed), Forward, nil},
		{"required property added to closed content model", jsonObject(a, closed), jsonObject(a+","+b, closed+`,"required":["b"]`), Backward,
			[]string{"REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL", "REQUIRED_ATTRIBUTE_ADDED"}},
		{"required property with default added to closed content model", jsonObject(a, closed), jsonObject(a+`,"b":{"type":"integer","default":0}`, closed+`,"required":["b"]`), Backward, nil},
		{"required added", jsonObject(a, ""), jsonObject(a, `"required":["a"]`), Backward, []string{"REQUIRED_ATTRIBUTE_ADDED"}},
		{"required removed", jsonObject(a, `"required":["a"]`), jsonObject(a, ""), Backward, nil},
		{"closing the content model", jsonObject(a, ""), jsonObject(a, closed), Backward, []string{"ADDITIONAL_PROPERTIES_REMOVED"}},
		{"opening the content model", jsonObject(a, closed), jsonObject(a, ""), Backward, nil},
		{"property covered by partially open model", jsonObject(a+","+b, `"additionalProperties":{"type":"integer"}`), jsonObject(a, `"additionalProperties":{"type":"integer"}`), Backward, nil},
		{"property not covered by partially open model", jsonObject(a+","+b, `"additionalProperties":{"type":"string"}`), jsonObject(a, `"additionalProperties":{"type":"string"}`), Backward,
			[]string{"PROPERTY_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL"}},
		{"type narrowed", `{"type":["string","null"]}`, `{"type":"string"}`, Backward, []string{"TYPE_NARROWED"}},
		{"type extended", `{"type":"string"}`, `{"type":["string","null"]}`, Backward, nil},
		{"integer to number", `{"type":"integer"}`, `{"type":"number"}`, Backward, nil},
		{"number to integer", `{"type":"number"}`, `{"type":"integer"}`, Backward, []string{"TYPE_NARROWED"}},
		{"type changed", `{"type":"string"}`, `{"type":"integer"}`, Backward, []string{"TYPE_CHANGED"}},
		{"nested property type changed", jsonObject(a, ""), jsonObject(`"a":{"type":"boolean"}`, ""), Backward, []string{"TYPE_CHANGED"}},
		{"maxLength added", `{"type":"string"}`, `{"type":"string","maxLength":10}`, Backward, []string{"MAX_LENGTH_ADDED"}},
		{"maxLength decreased", `{"type":"string","maxLength":10}`, `{"type":"string","maxLength":5}`, Backward, []string{"MAX_LENGTH_DECREASED"}},
		{"maxLength increased", `{"type":"string","maxLength":5}`, `{"type":"string","maxLength":10}`, Backward, nil},
		{"minimum increased", `{"type":"integer","minimum":0}`, `{"type":"integer","minimum":1}`, Backward, []string{"MINIMUM_INCREASED"}},
		{"enum extended", `{"enum":["A","B"]}`, `{"enum":["A","B","C"]}`, Backward, nil},
		{"enum narrowed", `{"enum":["A","B"]}`, `{"enum":["A"]}`, Backward, []string{"ENUM_ARRAY_NARROWED"}},
		{"pattern added", `{"type":"string"}`, `{"type":"string","pattern":"^a"}`, Backward, []string{"PATTERN_ADDED"}},
		{"oneOf extended", `{"oneOf":[{"type":"string"}]}`, `{"oneOf":[{"type":"string"},{"type":"integer"}]}`, Backward, nil},
		{"oneOf narrowed", `{"oneOf":[{"type":"string"},{"type":"integer"}]}`, `{"oneOf":[{"type":"string"}]}`, Backward, []string{"SUM_TYPE_NARROWED"}},
		{"array items changed", `{"type":"array","items":{"type":"string"}}`, `{"type":"array","items":{"type":"integer"}}`, Backward, []string{"TYPE_CHANGED"}},
		{"local refs followed", `{"$defs":{"s":{"type":"string"}},"type":"object","properties":{"a":{"$ref":"#/$defs/s"}}}`,
			`{"$defs":{"s":{"type":"integer"}},"type":"object","properties":{"a":{"$ref":"#/$defs/s"}}}`, Backward, []string{"TYPE_CHANGED"}},
	})
}

func TestJSONSchemaMessage(t *testing.T) {
	found, err := Check(Backward, Schema{Format: JSON, Text: jsonObject(`"a":{"type":"string"}`, `"additionalProperties":false`)},
		[]Schema{{Format: JSON, Text: jsonObject(`"a":{"type":"string"},"b":{"type":"string"}`, `"additionalProperties":false`)}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := "{errorType:'PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL', description:'The new has a closed content model and is missing a property or item present at path '#/properties/b' in the old schema'}"
	if len(found) != 1 || found[0].String() != want {
		t.Fatalf("got %v, want %s", found, want)
	}
}

func proto3(body string) string { return "syntax = \"proto3\";\npackage shop;\n" + body }
func proto2(body string) string { return "syntax = \"proto2\";\npackage shop;\n" + body }

func TestProtobufCompatibility(t *testing.T) {
	order := proto3(`message Order { string id = 1; int32 qty = 2; }`)
	runCompat(t, Protobuf, []compatCase{
		{"identical", order, order, FullTransitive, nil},
		{"field added", order, proto3(`message Order { string id = 1; int32 qty = 2; string note = 3; }`), FullTransitive, nil},
		{"field removed", order, proto3(`message Order { string id = 1; }`), FullTransitive, nil},
		{"field renamed", order, proto3(`message Order { string id = 1; int32 quantity = 2; }`), Full, nil},
		{"field number reused with another type", order, proto3(`message Order { string id = 1; string qty = 2; }`), Backward, []string{protoFieldScalarKind}},
		{"field number reused by a message", order, proto3(`message Item { string sku = 1; } message Order { string id = 1; Item qty = 2; }`), Backward, []string{protoFieldKindChanged}},
		{"field number changed", order, proto3(`message Order { string id = 1; int32 qty = 5; }`), Backward, nil},
		{"int32 to int64", order, proto3(`message Order { string id = 1; int64 qty = 2; }`), Full, nil},
		{"int32 to sint32", order, proto3(`message Order { string id = 1; sint32 qty = 2; }`), Backward, []string{protoFieldScalarKind}},
		{"string to bytes", order, proto3(`message Order { bytes id = 1; int32 qty = 2; }`), Full, nil},
		{"message removed", proto3(`message Order { string id = 1; } message Item { string sku = 1; }`), proto3(`message Order { string id = 1; }`), Backward, []string{protoMessageRemoved}},
		{"message added", proto3(`message Order { string id = 1; }`), proto3(`message Order { string id = 1; } message Item { string sku = 1; }`), Backward, nil},
		{"message type of field changed", proto3(`message A { string x = 1; } message B { string y = 1; } message Order { A a = 1; }`),
			proto3(`message A { string x = 1; } message B { string y = 1; } message Order { B a = 1; }`), Backward, []string{protoFieldNamedType}},
		{"required field added", proto2(`message Order { optional string id = 1; }`), proto2(`message Order { optional string id = 1; required int32 qty = 2; }`), Backward, []string{protoRequiredFieldAdded}},
		{"required field removed", proto2(`message Order { optional string id = 1; required int32 qty = 2; }`), proto2(`message Order { optional string id = 1; }`), Backward, []string{protoRequiredFieldRemoved}},
		{"oneof field removed", proto3(`message Order { oneof pay { string card = 1; string iban = 2; } }`), proto3(`message Order { oneof pay { string card = 1; } }`), Backward, []string{protoOneofFieldRemoved}},
		{"one field moved into a new oneof", proto3(`message Order { string card = 1; }`), proto3(`message Order { oneof pay { string card = 1; } }`), Backward, nil},
		{"two fields moved into a new oneof", proto3(`message Order { string card = 1; string iban = 2; }`), proto3(`message Order { oneof pay { string card = 1; string iban = 2; } }`), Backward, []string{protoFieldsMovedToOneof}},
		{"package changed", order, "syntax = \"proto3\";\npackage market;\nmessage Order { string id = 1; int32 qty = 2; }", Full, nil},
		{"map value changed", proto3(`message Order { map<string, int32> items = 1; }`), proto3(`message Order { map<string, string> items = 1; }`), Backward, []string{protoFieldScalarKind}},
	})
}

// TestTransitive checks the levels over three versions where the newest is
// compatible with the latest but not with the first.
func TestTransitive(t *testing.T) {
	v1 := avroRecord(`{"name":"id","type":"string"}`)
	v2 := avroRecord(`{"name":"id","type":"string"},{"name":"qty","type":"int","default":0}`)
	v3 := avroRecord(`{"name":"id","type":"string"},{"name":"qty","type":"int"}`)
	older := []Schema{{Text: v1}, {Text: v2}}
	for _, tc := range []struct {
		level Level
		want  []string
		index []int
	}{
		{Backward, nil, nil},
		{BackwardTransitive, []string{avroMissingDefault}, []int{0}},
		{Forward, nil, nil},
		{ForwardTransitive, nil, nil},
		{Full, nil, nil},
		{FullTransitive, []string{avroMissingDefault}, []int{0}},
		{None, nil, nil},
	} {
		t.Run(string(tc.level), func(t *testing.T) {
			found, err := Check(tc.level, Schema{Text: v3}, older, nil)
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(types(found)) != fmt.Sprint(tc.want) {
				t.Fatalf("got %v, want %v", found, tc.want)
			}
			for i, f := range found {
				if f.OlderIndex != tc.index[i] {
					t.Errorf("incompatibility %d is against version index %d, want %d", i, f.OlderIndex, tc.index[i])
				}
			}
		})
	}
	// Forward transitive over three versions: v3 drops a field v1 needs.
	w1 := avroRecord(`{"name":"id","type":"string"},{"name":"qty","type":"int"}`)
	w2 := avroRecord(`{"name":"id","type":"string"},{"name":"qty","type":"int","default":0}`)
	w3 := avroRecord(`{"name":"id","type":"string"}`)
	found, err := Check(Forward, Schema{Text: w3}, []Schema{{Text: w1}, {Text: w2}}, nil)
	if err != nil || len(found) != 0 {
		t.Fatalf("FORWARD against the latest: %v, %v", found, err)
	}
	found, err = Check(ForwardTransitive, Schema{Text: w3}, []Schema{{Text: w1}, {Text: w2}}, nil)
	if err != nil || fmt.Sprint(types(found)) != fmt.Sprint([]string{avroMissingDefault}) || found[0].OlderIndex != 0 {
		t.Fatalf("FORWARD_TRANSITIVE: %v, %v", found, err)
	}
}

// registry is a set of registered schemas by subject and version, for
// references.
type registry map[string]Schema

func (r registry) lookup(ref Reference) (Schema, error) {
	s, ok := r[fmt.Sprintf("%s/%d", ref.Subject, ref.Version)]
	if !ok {
		return Schema{}, errors.New("not registered")
	}
	return s, nil
}

func TestReferences(t *testing.T) {
	reg := registry{
		"money/1":      {Format: Avro, Text: `{"type":"record","name":"Money","namespace":"shop","fields":[{"name":"cents","type":"long"}]}`},
		"money/2":      {Format: Avro, Text: `{"type":"record","name":"Money","namespace":"shop","fields":[{"name":"cents","type":"string"}]}`},
		"address/1":    {Format: JSON, Text: `{"type":"object","properties":{"city":{"type":"string"}}}`},
		"item-proto/1": {Format: Protobuf, Text: proto3(`message Item { string sku = 1; }`)},
	}
	t.Run("avro", func(t *testing.T) {
		order := func(v int) Schema {
			return Schema{Format: Avro, Text: avroRecord(`{"name":"total","type":"shop.Money"}`),
				References: []Reference{{Name: "shop.Money", Subject: "money", Version: v}}}
		}
		if err := Parse(order(1), reg.lookup); err != nil {
			t.Fatalf("Parse: %v", err)
		}
		found, err := Check(Backward, order(2), []Schema{order(1)}, reg.lookup)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(types(found)) != fmt.Sprint([]string{avroTypeMismatch}) || found[0].Path != "/fields/0/type/fields/0/type" {
			t.Fatalf("got %v", found)
		}
		if err := Parse(Schema{Text: order(1).Text}, reg.lookup); !errors.Is(err, ErrInvalidSchema) {
			t.Fatalf("without its reference: got %v, want ErrInvalidSchema", err)
		}
		if err := Parse(order(9), reg.lookup); !errors.Is(err, ErrReference) {
			t.Fatalf("unknown reference: got %v, want ErrReference", err)
		}
	})
	t.Run("json", func(t *testing.T) {
		s := Schema{Format: JSON, Text: `{"type":"object","properties":{"to":{"$ref":"address.json"}}}`,
			References: []Reference{{Name: "address.json", Subject: "address", Version: 1}}}
		if err := Parse(s, reg.lookup); err != nil {
			t.Fatalf("Parse: %v", err)
		}
		s.References = nil
		if err := Parse(s, reg.lookup); err == nil {
			t.Fatal("a $ref to an unregistered document parsed")
		}
	})
	t.Run("protobuf", func(t *testing.T) {
		s := Schema{Format: Protobuf, Text: proto3(`import "item.proto"; message Order { Item item = 1; }`),
			References: []Reference{{Name: "item.proto", Subject: "item-proto", Version: 1}}}
		if err := Parse(s, reg.lookup); err != nil {
			t.Fatalf("Parse: %v", err)
		}
		s.References = nil
		if err := Parse(s, reg.lookup); !errors.Is(err, ErrInvalidSchema) {
			t.Fatalf("import without a reference: got %v", err)
		}
		wkt := Schema{Format: Protobuf, Text: proto3(`import "google/protobuf/timestamp.proto"; message Order { google.protobuf.Timestamp at = 1; }`)}
		if err := Parse(wkt, nil); err != nil {
			t.Fatalf("well-known import: %v", err)
		}
	})
	t.Run("cycle", func(t *testing.T) {
		cyc := registry{
			"a/1": {Format: Protobuf, Text: proto3(`message A {}`), References: []Reference{{Name: "b.proto", Subject: "b", Version: 1}}},
			"b/1": {Format: Protobuf, Text: proto3(`message B {}`), References: []Reference{{Name: "a.proto", Subject: "a", Version: 1}}},
		}
		s := Schema{Format: Protobuf, Text: proto3(`message C {}`), References: []Reference{{Name: "a.proto", Subject: "a", Version: 1}}}
		if err := Parse(s, cyc.lookup); !errors.Is(err, ErrReference) {
			t.Fatalf("got %v, want ErrReference", err)
		}
	})
}

func TestCanonical(t *testing.T) {
	for _, tc := range []struct {
		name     string
		a, b     Schema
		wantSame bool
	}{
		{"avro whitespace and order", Schema{Text: `{"type":"record","name":"R","namespace":"n","fields":[{"name":"a","type":"int"}]}`},
			Schema{Text: "{ \"fields\": [ {\"type\": \"int\", \"name\": \"a\"} ],\n \"name\": \"n.R\", \"type\": \"record\" }"}, true},
		{"avro default differs", Schema{Text: `{"type":"record","name":"R","fields":[{"name":"a","type":"int","default":1}]}`},
			Schema{Text: `{"type":"record","name":"R","fields":[{"name":"a","type":"int","default":2}]}`}, false},
		{"json key order", Schema{Format: JSON, Text: `{"type":"object","properties":{"a":{"type":"string"}}}`},
			Schema{Format: JSON, Text: `{ "properties": { "a": { "type": "string" } }, "type": "object" }`}, true},
		{"json differs", Schema{Format: JSON, Text: `{"type":"string"}`}, Schema{Format: JSON, Text: `{"type":"integer"}`}, false},
		{"protobuf comments and spacing", Schema{Format: Protobuf, Text: proto3(`message A { string x = 1; }`)},
			Schema{Format: Protobuf, Text: proto3("// an order\nmessage A {\n  string x = 1; // id\n}\n")}, true},
		{"protobuf differs", Schema{Format: Protobuf, Text: proto3(`message A { string x = 1; }`)}, Schema{Format: Protobuf, Text: proto3(`message A { string x = 2; }`)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ca, err := Canonical(tc.a, nil)
			if err != nil {
				t.Fatal(err)
			}
			cb, err := Canonical(tc.b, nil)
			if err != nil {
				t.Fatal(err)
			}
			if (ca == cb) != tc.wantSame {
				t.Fatalf("same=%v, want %v:\n%s\n%s", ca == cb, tc.wantSame, ca, cb)
			}
		})
	}
	pcf, err := AvroParsingCanonicalForm(Schema{Text: `{"type":"record","name":"R","namespace":"n","doc":"d","fields":[{"name":"a","type":"int","default":1}]}`}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"name":"n.R","type":"record","fields":[{"name":"a","type":"int"}]}`; pcf != want {
		t.Fatalf("parsing canonical form %s, want %s", pcf, want)
	}
}

func TestInvalidInput(t *testing.T) {
	for _, s := range []Schema{
		{Text: `{"type":"record"`},
		{Text: `{"type":"nope"}`},
		{Format: JSON, Text: `{"type":5}`},
		{Format: JSON, Text: `not json`},
		{Format: Protobuf, Text: `message {`},
		{Format: "XML", Text: `<a/>`},
		{Text: strings.Repeat(" ", MaxSchemaBytes+1)},
		{Format: JSON, Text: strings.Repeat(`{"items":`, 200) + `{}` + strings.Repeat(`}`, 200)},
	} {
		if err := Parse(s, nil); err == nil {
			t.Errorf("Parse(%.40q) of format %q succeeded", s.Text, s.Format)
		}
	}
	if _, err := ParseLevel("SIDEWAYS"); !errors.Is(err, ErrUnknownLevel) {
		t.Errorf("ParseLevel: %v", err)
	}
	if l, err := ParseLevel("full_transitive"); err != nil || l != FullTransitive {
		t.Errorf("ParseLevel(full_transitive) = %v, %v", l, err)
	}
}

func TestFormatChange(t *testing.T) {
	found, err := Check(Backward, Schema{Format: JSON, Text: `{"type":"string"}`}, []Schema{{Text: `"string"`}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(found) != 1 || found[0].String() != "Incompatible because of different schema type" {
		t.Fatalf("got %v", found)
	}
}

func TestJSONSchemaDrafts(t *testing.T) {
	// Draft-07 is the default, as in Confluent: items may be a tuple.
	if err := Parse(Schema{Format: JSON, Text: `{"type":"array","items":[{"type":"string"},{"type":"integer"}]}`}, nil); err != nil {
		t.Fatalf("draft-07 tuple items: %v", err)
	}
	if err := Parse(Schema{Format: JSON, Text: `{"$schema":"https://json-schema.org/draft/2020-12/schema","prefixItems":[{"type":"string"}]}`}, nil); err != nil {
		t.Fatalf("draft 2020-12: %v", err)
	}
	// A reference named relative to the document's $id.
	reg := registry{"address/1": {Format: JSON, Text: `{"type":"object"}`}}
	s := Schema{Format: JSON, Text: `{"$id":"https://shop.example/schemas/order.json","properties":{"to":{"$ref":"address.json"}}}`,
		References: []Reference{{Name: "address.json", Subject: "address", Version: 1}}}
	if err := Parse(s, reg.lookup); err != nil {
		t.Fatalf("reference relative to $id: %v", err)
	}
}

func TestJSONSchemaTuples(t *testing.T) {
	tuple := func(items string, rest string) string {
		s := `{"type":"array","items":[` + items + `]`
		if rest != "" {
			s += `,"additionalItems":` + rest
		}
		return s + "}"
	}
	str, num := `{"type":"string"}`, `{"type":"integer"}`
	runCompat(t, JSON, []compatCase{
		{"item added to open tuple", tuple(str, ""), tuple(str+","+num, ""), Backward, []string{"ITEM_ADDED_TO_OPEN_CONTENT_MODEL"}},
		{"item added to closed tuple", tuple(str, "false"), tuple(str+","+num, "false"), Backward, nil},
		{"item removed from open tuple", tuple(str+","+num, ""), tuple(str, ""), Backward, nil},
		{"item removed from closed tuple", tuple(str+","+num, "false"), tuple(str, "false"), Backward, []string{"ITEM_REMOVED_FROM_CLOSED_CONTENT_MODEL"}},
		{"item type changed", tuple(str, ""), tuple(num, ""), Backward, []string{"TYPE_CHANGED"}},
		{"2020-12 prefixItems closed", `{"$schema":"https://json-schema.org/draft/2020-12/schema","prefixItems":[` + str + `,` + num + `],"items":false}`,
			`{"$schema":"https://json-schema.org/draft/2020-12/schema","prefixItems":[` + str + `],"items":false}`, Backward, []string{"ITEM_REMOVED_FROM_CLOSED_CONTENT_MODEL"}},
	})
}

func TestJSONSchemaECMAPatterns(t *testing.T) {
	// Lookahead is ECMA-262, which JSON Schema specifies; Go's regexp lacks it.
	if err := Parse(Schema{Format: JSON, Text: `{"type":"string","pattern":"^(?=.*[0-9])[a-z0-9]+$"}`}, nil); err != nil {
		t.Fatalf("ECMA pattern: %v", err)
	}
	if err := Parse(Schema{Format: JSON, Text: `{"type":"string","pattern":"([a-z"}`}, nil); !errors.Is(err, ErrInvalidSchema) {
		t.Fatalf("broken pattern: got %v, want ErrInvalidSchema", err)
	}
}

func TestJSONSchemaNot(t *testing.T) {
	runCompat(t, JSON, []compatCase{
		{"not changed", `{"not":{"type":"string"}}`, `{"not":{"type":["string","integer"]}}`, Backward, []string{"NOT_TYPE_EXTENDED"}},
		{"not unchanged", `{"not":{"type":"string"}}`, `{"not":{"type":"string"}}`, Backward, nil},
	})
}
