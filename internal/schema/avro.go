package schema

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/hamba/avro/v2"
)

// Avro compatibility follows Avro's own schema resolution rules
// (SchemaCompatibility in the Java library), which Confluent reports with
// these error types and descriptions.
const (
	avroNameMismatch      = "NAME_MISMATCH"
	avroFixedSizeMismatch = "FIXED_SIZE_MISMATCH"
	avroMissingSymbols    = "MISSING_ENUM_SYMBOLS"
	avroMissingDefault    = "READER_FIELD_MISSING_DEFAULT_VALUE"
	avroTypeMismatch      = "TYPE_MISMATCH"
	avroMissingBranch     = "MISSING_UNION_BRANCH"
)

var avroDescriptions = map[string]string{
	avroNameMismatch:      "The name of the schema has changed (path '%s')",
	avroFixedSizeMismatch: "The size of FIXED type field at path '%s' in the {reader} schema does not match with the {writer} schema",
	avroMissingSymbols:    "The {reader} schema is missing enum symbols '%s' at path '%s' in the {writer} schema",
	avroMissingDefault:    "The field '%s' at path '%s' in the {reader} schema has no default value and is missing in the {writer} schema",
	avroTypeMismatch:      "The type (path '%s') of a field in the {reader} schema does not match with the {writer} schema",
	avroMissingBranch:     "The {reader} schema is missing a type inside a union field at path '%s' in the {writer} schema",
}

type avroSchema struct {
	schema avro.Schema
}

// parseAvro parses s after its references, each of which defines named
// types that s may use by name. A fresh cache per parse keeps one request's
// names out of another's (hamba's package-level cache is never used).
// hamba/avro checks each field's default against its type (for a union,
// its first branch), so such a schema is refused as invalid; Avro's Java
// parser can be told to skip that check, and a registry configured so
// would accept it.
func parseAvro(s Schema, refs []resolved) (*avroSchema, error) {
	cache := &avro.SchemaCache{}
	for _, ref := range refs {
		if _, err := avro.ParseWithCache(ref.schema.Text, "", cache); err != nil {
			return nil, fmt.Errorf("%w: reference %s: %w", ErrInvalidSchema, ref.name, err)
		}
	}
	parsed, err := avro.ParseWithCache(s.Text, "", cache)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidSchema, err)
	}
	return &avroSchema{schema: parsed}, nil
}

func (a *avroSchema) canonical() (string, error) {
	b, err := json.Marshal(a.schema)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrInvalidSchema, err)
	}
	return string(b), nil
}

// AvroParsingCanonicalForm returns Avro's Parsing Canonical Form of s (the
// specification's form for fingerprints: no defaults, docs or aliases).
func AvroParsingCanonicalForm(s Schema, lookup Lookup) (string, error) {
	s.Format = Avro
	p, err := parse(s, lookup)
	if err != nil {
		return "", err
	}
	return p.(*avroSchema).schema.String(), nil
}

// avroChecker walks a reader and a writer schema together.
type avroChecker struct {
	d     direction
	found []Incompatibility
	// seen holds the named reader/writer pairs under comparison, so that a
	// recursive type is compared once (its recursion is assumed compatible,
	// as in Avro's checker).
	seen map[[2]string]bool
}

func compareAvro(reader, writer *avroSchema, d direction) []Incompatibility {
	c := &avroChecker{d: d, seen: map[[2]string]bool{}}
	c.check(reader.schema, writer.schema, "", 0)
	return c.found
}

func (c *avroChecker) add(typ, path, info string) {
	if path == "" {
		path = "/"
	}
	desc := avroDescriptions[typ]
	switch typ {
	case avroMissingSymbols, avroMissingDefault:
		desc = fmt.Sprintf(desc, info, path)
	default:
		desc = fmt.Sprintf(desc, path)
	}
	c.found = append(c.found, Incompatibility{Type: typ, Path: path, Description: describe(desc, c.d), AdditionalInfo: info})
}

func deref(s avro.Schema) avro.Schema {
	if r, ok := s.(*avro.RefSchema); ok {
		return r.Schema()
	}
	return s
}

func avroTypeName(s avro.Schema) string {
	return strings.ToUpper(string(s.Type()))
}

// check records what reader breaks reading writer's data; it reports
// whether reader reads writer's data.
func (c *avroChecker) check(reader, writer avro.Schema, path string, depth int) bool {
	reader, writer = deref(reader), deref(writer)
	if depth > maxDepth {
		c.add(avroTypeMismatch, path, "schemas nested too deeply to compare")
		return false
	}
	if reader.Type() == writer.Type() {
		return c.checkSameType(reader, writer, path, depth)
	}
	if wu, ok := writer.(*avro.UnionSchema); ok {
		ok := true
		for i, branch := range wu.Types() {
			if !c.check(reader, branch, path+"/"+strconv.Itoa(i), depth+1) {
				ok = false
			}
		}
		return ok
	}
	if ru, ok := reader.(*avro.UnionSchema); ok {
		for _, branch := range ru.Types() {
			if c.quiet(branch, writer, depth+1) {
				return true
			}
		}
		c.add(avroMissingBranch, path, "reader union lacking writer type: "+avroTypeName(writer))
		return false
	}
	if promotable(reader.Type(), writer.Type()) {
		return true
	}
	c.add(avroTypeMismatch, path, fmt.Sprintf("reader type: %s not compatible with writer type: %s", avroTypeName(reader), avroTypeName(writer)))
	return false
}

// quiet reports whether reader reads writer's data, recording nothing.
func (c *avroChecker) quiet(reader, writer avro.Schema, depth int) bool {
	sub := &avroChecker{d: c.d, seen: c.seen}
	return sub.check(reader, writer, "", depth)
}

// promotable reports Avro's promotions of a writer's primitive type.
func promotable(reader, writer avro.Type) bool {
	switch reader {
	case avro.Long:
		return writer == avro.Int
	case avro.Float:
		return writer == avro.Int || writer == avro.Long
	case avro.Double:
		return writer == avro.Int || writer == avro.Long || writer == avro.Float
	case avro.String:
		return writer == avro.Bytes
	case avro.Bytes:
		return writer == avro.String
	}
	return false
}

func (c *avroChecker) checkSameType(reader, writer avro.Schema, path string, depth int) bool {
	switch r := reader.(type) {
	case *avro.ArraySchema:
		return c.check(r.Items(), writer.(*avro.ArraySchema).Items(), path+"/items", depth+1)
	case *avro.MapSchema:
		return c.check(r.Values(), writer.(*avro.MapSchema).Values(), path+"/values", depth+1)
	case *avro.FixedSchema:
		w := writer.(*avro.FixedSchema)
		ok := c.checkName(r, w, path)
		if r.Size() != w.Size() {
			c.add(avroFixedSizeMismatch, path+"/size", fmt.Sprintf("expected: %d, found: %d", w.Size(), r.Size()))
			ok = false
		}
		return ok
	case *avro.EnumSchema:
		w := writer.(*avro.EnumSchema)
		ok := c.checkName(r, w, path)
		if r.HasDefault() {
			return ok
		}
		var missing []string
		for _, sym := range w.Symbols() {
			if !contains(r.Symbols(), sym) {
				missing = append(missing, sym)
			}
		}
		if len(missing) > 0 {
			c.add(avroMissingSymbols, path+"/symbols", "["+strings.Join(missing, ", ")+"]")
			ok = false
		}
		return ok
	case *avro.RecordSchema:
		return c.checkRecord(r, writer.(*avro.RecordSchema), path, depth)
	case *avro.UnionSchema:
		ok := true
		for i, branch := range writer.(*avro.UnionSchema).Types() {
			compatible := false
			for _, rb := range r.Types() {
				if c.quiet(rb, branch, depth+1) {
					compatible = true
					break
				}
			}
			if !compatible {
				c.add(avroMissingBranch, path+"/"+strconv.Itoa(i), "reader union lacking writer type: "+avroTypeName(deref(branch)))
				ok = false
			}
		}
		return ok
	}
	return true // primitives of one type
}

func (c *avroChecker) checkName(reader, writer avro.NamedSchema, path string) bool {
	if reader.FullName() == writer.FullName() || contains(reader.Aliases(), writer.FullName()) {
		return true
	}
	c.add(avroNameMismatch, path+"/name", "expected: "+writer.FullName())
	return false
}

func (c *avroChecker) checkRecord(reader, writer *avro.RecordSchema, path string, depth int) bool {
	ok := c.checkName(reader, writer, path)
	pair := [2]string{reader.FullName(), writer.FullName()}
	if c.seen[pair] {
		return ok
	}
	c.seen[pair] = true
	defer delete(c.seen, pair)
	for i, rf := range reader.Fields() {
		fieldPath := path + "/fields/" + strconv.Itoa(i)
		wf := writerField(writer, rf)
		if wf == nil {
			if !rf.HasDefault() {
				c.add(avroMissingDefault, fieldPath, rf.Name())
				ok = false
			}
			continue
		}
		if !c.check(rf.Type(), wf.Type(), fieldPath+"/type", depth+1) {
			ok = false
		}
	}
	return ok
}

// writerField finds the writer's field that the reader's field reads: the
// one of its name, or of one of its aliases.
func writerField(writer *avro.RecordSchema, rf *avro.Field) *avro.Field {
	for _, wf := range writer.Fields() {
		if wf.Name() == rf.Name() {
			return wf
		}
	}
	for _, alias := range rf.Aliases() {
		for _, wf := range writer.Fields() {
			if wf.Name() == alias {
				return wf
			}
		}
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
