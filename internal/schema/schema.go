// Package schema holds the schema registry's formats and compatibility rules:
// Avro, JSON Schema and Protobuf, checked the way Confluent Schema Registry
// checks them, so that a client that registers a schema with Strata gets the
// same answer, with the same error types, as it would from Confluent.
//
// The package is pure: it parses schema text with the format's own library
// (github.com/hamba/avro/v2, github.com/santhosh-tekuri/jsonschema/v6,
// github.com/bufbuild/protocompile), never reads files or the network, and
// resolves schema references only through the Lookup the caller gives. The
// registry's REST API and its `_schemas` storage are built on it.
//
// Compatibility is a question about a reader and a writer. BACKWARD asks
// whether the new schema (reader) reads data written with an older one
// (writer); FORWARD asks the reverse; FULL asks both. The transitive levels
// ask against every older version, the others against the latest only:
//
//	level                older versions checked   direction(s)
//	BACKWARD             latest                   reader=new, writer=old
//	BACKWARD_TRANSITIVE  all                      reader=new, writer=old
//	FORWARD              latest                   reader=old, writer=new
//	FORWARD_TRANSITIVE   all                      reader=old, writer=new
//	FULL                 latest                   both
//	FULL_TRANSITIVE      all                      both
//	NONE                 none                     -
package schema

import (
	"errors"
	"fmt"
	"strings"
)

// Format is a schema type as the registry's REST API names it ("schemaType").
type Format string

// The formats, by their REST API names. An empty format means Avro, as in
// Confluent's API.
const (
	Avro     Format = "AVRO"
	JSON     Format = "JSON"
	Protobuf Format = "PROTOBUF"
)

// Formats lists the supported formats in the order /schemas/types answers them.
var Formats = []Format{Avro, JSON, Protobuf}

// Level is a compatibility level as Confluent names it.
type Level string

// The compatibility levels.
const (
	None               Level = "NONE"
	Backward           Level = "BACKWARD"
	BackwardTransitive Level = "BACKWARD_TRANSITIVE"
	Forward            Level = "FORWARD"
	ForwardTransitive  Level = "FORWARD_TRANSITIVE"
	Full               Level = "FULL"
	FullTransitive     Level = "FULL_TRANSITIVE"
)

// Limits on input, checked before parsing so a registry never spends
// unbounded memory or stack on a request.
const (
	// MaxSchemaBytes bounds the text of one schema.
	MaxSchemaBytes = 1 << 20
	// MaxReferences bounds the schemas reachable through references from one
	// schema, counted over the whole reference graph.
	MaxReferences = 256
	// maxDepth bounds nesting walked by the compatibility rules.
	maxDepth = 128
)

var (
	// ErrInvalidSchema is returned when a schema's text does not parse, or
	// fails its format's rules. The wrapped message says why; the REST API
	// answers it with error code 42201.
	ErrInvalidSchema = errors.New("schema: invalid schema")
	// ErrUnknownFormat is returned for a schema type that is not AVRO, JSON or
	// PROTOBUF.
	ErrUnknownFormat = errors.New("schema: unknown schema type")
	// ErrUnknownLevel is returned by ParseLevel for a name that is not a
	// compatibility level.
	ErrUnknownLevel = errors.New("schema: unknown compatibility level")
	// ErrReference is returned when a reference cannot be resolved: the
	// lookup failed, the references form a cycle, or there are more than
	// MaxReferences.
	ErrReference = errors.New("schema: unresolvable reference")
)

// Reference names another registered schema that a schema imports: a
// Protobuf import path, a JSON Schema $ref URL, or an Avro named type.
type Reference struct {
	// Name is how the referring schema names the referenced one.
	Name string `json:"name"`
	// Subject and Version locate the referenced schema in the registry.
	Subject string `json:"subject"`
	Version int    `json:"version"`
}

// Schema is a schema as registered: its format, text and references.
type Schema struct {
	Format     Format      `json:"schemaType,omitempty"`
	Text       string      `json:"schema"`
	References []Reference `json:"references,omitempty"`
}

// Lookup returns the schema a reference names. It is called during Parse,
// Check and Canonical, from the calling goroutine only; it may be nil when no
// schema has references.
type Lookup func(Reference) (Schema, error)

// Incompatibility is one rule a new schema breaks against an older one.
type Incompatibility struct {
	// Type is Confluent's error type, such as READER_FIELD_MISSING_DEFAULT_VALUE;
	// empty when the schemas are of different formats, which Confluent
	// reports with a bare message.
	Type string
	// Path locates the offending element: an Avro JSON path
	// ("/fields/2/type"), a JSON pointer ("#/properties/a") or a Protobuf
	// path ("#/Order/3").
	Path string
	// Description is Confluent's sentence for the rule, with "new" and "old"
	// in place of reader and writer.
	Description string
	// AdditionalInfo carries Avro's detail (the field name, the missing
	// symbols, the mismatched types); empty for the other formats.
	AdditionalInfo string
	// OlderIndex is the index, in the older versions given to Check, of the
	// version this incompatibility is against.
	OlderIndex int
}

// String formats the incompatibility as Confluent's REST API does inside its
// messages.
func (i Incompatibility) String() string {
	if i.Type == "" {
		return i.Description
	}
	if i.AdditionalInfo != "" {
		return fmt.Sprintf("{errorType:'%s', description:'%s', additionalInfo:'%s'}", i.Type, i.Description, i.AdditionalInfo)
	}
	return fmt.Sprintf("{errorType:'%s', description:'%s'}", i.Type, i.Description)
}

// ParseLevel returns the level named by s, in any letter case.
func ParseLevel(s string) (Level, error) {
	l := Level(strings.ToUpper(s))
	switch l {
	case None, Backward, BackwardTransitive, Forward, ForwardTransitive, Full, FullTransitive:
		return l, nil
	}
	return "", fmt.Errorf("%w: %q", ErrUnknownLevel, s)
}

// ParseFormat returns the format named by s; "" is Avro.
func ParseFormat(s string) (Format, error) {
	f := Format(strings.ToUpper(s))
	switch f {
	case "":
		return Avro, nil
	case Avro, JSON, Protobuf:
		return f, nil
	}
	return "", fmt.Errorf("%w: %q", ErrUnknownFormat, s)
}

// parsed is a schema after parsing, in its format's representation.
type parsed interface {
	// canonical returns the form two schemas share exactly when the registry
	// must treat them as one schema.
	canonical() (string, error)
}

// direction says which side of a comparison is the new schema, so that
// descriptions read "new" and "old" as Confluent's do.
type direction struct{ reader, writer string }

var (
	newReadsOld = direction{reader: "new", writer: "old"}
	oldReadsNew = direction{reader: "old", writer: "new"}
)

// Parse checks that s is a valid schema of its format, resolving its
// references through lookup, and returns ErrInvalidSchema, ErrReference or
// ErrUnknownFormat if not.
func Parse(s Schema, lookup Lookup) error {
	_, err := parse(s, lookup)
	return err
}

func parse(s Schema, lookup Lookup) (parsed, error) {
	format, err := ParseFormat(string(s.Format))
	if err != nil {
		return nil, err
	}
	if len(s.Text) > MaxSchemaBytes {
		return nil, fmt.Errorf("%w: %d bytes, over the limit of %d", ErrInvalidSchema, len(s.Text), MaxSchemaBytes)
	}
	refs, err := resolveReferences(s, lookup)
	if err != nil {
		return nil, err
	}
	switch format {
	case Avro:
		return parseAvro(s, refs)
	case JSON:
		return parseJSON(s, refs)
	default:
		return parseProtobuf(s, refs)
	}
}

// resolved is one referenced schema, found through a Lookup.
type resolved struct {
	name   string
	schema Schema
}

// resolveReferences walks the reference graph of s depth first and returns
// every referenced schema once, dependencies before the schemas that use
// them, as Avro's named types need.
func resolveReferences(s Schema, lookup Lookup) ([]resolved, error) {
	if len(s.References) == 0 {
		return nil, nil
	}
	if lookup == nil {
		return nil, fmt.Errorf("%w: schema has references and no lookup was given", ErrReference)
	}
	type key struct {
		subject string
		version int
	}
	var (
		out      []resolved
		done     = map[key]bool{}
		visiting = map[key]bool{}
		walk     func(refs []Reference, depth int) error
	)
	walk = func(refs []Reference, depth int) error {
		for _, ref := range refs {
			k := key{ref.Subject, ref.Version}
			if done[k] {
				continue
			}
			if visiting[k] {
				return fmt.Errorf("%w: cycle through %s version %d", ErrReference, ref.Subject, ref.Version)
			}
			if len(done) >= MaxReferences || depth >= MaxReferences {
				return fmt.Errorf("%w: more than %d references", ErrReference, MaxReferences)
			}
			target, err := lookup(ref)
			if err != nil {
				return fmt.Errorf("%w: %s (subject %s version %d): %w", ErrReference, ref.Name, ref.Subject, ref.Version, err)
			}
			if len(target.Text) > MaxSchemaBytes {
				return fmt.Errorf("%w: %s is over %d bytes", ErrReference, ref.Name, MaxSchemaBytes)
			}
			visiting[k] = true
			if err := walk(target.References, depth+1); err != nil {
				return err
			}
			delete(visiting, k)
			done[k] = true
			out = append(out, resolved{name: ref.Name, schema: target})
		}
		return nil
	}
	if err := walk(s.References, 0); err != nil {
		return nil, err
	}
	return out, nil
}

// Canonical returns the normalized form of s: two schemas with the same
// canonical form are the same schema to the registry and get the same id.
// Avro: the schema's JSON with whitespace, attribute order and name
// qualification normalized, defaults, aliases and docs kept (Avro's parsing
// canonical form, which drops defaults, is AvroParsingCanonicalForm). JSON
// Schema: the document re-encoded compactly with object keys sorted.
// Protobuf: the deterministic encoding of the file's descriptor without
// source positions or comments, base64-encoded — an identity, not a text to
// show.
func Canonical(s Schema, lookup Lookup) (string, error) {
	p, err := parse(s, lookup)
	if err != nil {
		return "", err
	}
	return p.canonical()
}

// Check returns the rules newSchema breaks at level against olderVersions,
// which are ordered oldest first (the latest is last). An empty result means
// compatible. The error is non-nil only when a schema cannot be parsed or the
// level is unknown; an older version that no longer parses is an error too,
// since the registry could not have accepted it.
func Check(level Level, newSchema Schema, olderVersions []Schema, lookup Lookup) ([]Incompatibility, error) {
	level, err := ParseLevel(string(level))
	if err != nil {
		return nil, err
	}
	next, err := parse(newSchema, lookup)
	if err != nil {
		return nil, err
	}
	if level == None || len(olderVersions) == 0 {
		return nil, nil
	}
	first := len(olderVersions) - 1
	switch level {
	case BackwardTransitive, ForwardTransitive, FullTransitive:
		first = 0
	}
	backward := level == Backward || level == BackwardTransitive || level == Full || level == FullTransitive
	forward := level == Forward || level == ForwardTransitive || level == Full || level == FullTransitive
	var out []Incompatibility
	// Newest first, as Confluent reports against the latest version first.
	for i := len(olderVersions) - 1; i >= first; i-- {
		older := olderVersions[i]
		if mustFormat(older.Format) != mustFormat(newSchema.Format) {
			out = append(out, Incompatibility{Description: "Incompatible because of different schema type", OlderIndex: i})
			continue
		}
		old, err := parse(older, lookup)
		if err != nil {
			return nil, fmt.Errorf("older version %d: %w", i, err)
		}
		var found []Incompatibility
		if backward {
			found = append(found, compare(next, old, newReadsOld)...)
		}
		if forward {
			found = append(found, compare(old, next, oldReadsNew)...)
		}
		for _, f := range found {
			f.OlderIndex = i
			out = append(out, f)
		}
	}
	return out, nil
}

func mustFormat(f Format) Format {
	p, err := ParseFormat(string(f))
	if err != nil {
		return f
	}
	return p
}

// compare returns what reader breaks reading data written with writer. Both
// are of one format.
func compare(reader, writer parsed, d direction) []Incompatibility {
	switch r := reader.(type) {
	case *avroSchema:
		return compareAvro(r, writer.(*avroSchema), d)
	case *jsonSchema:
		return compareJSON(r, writer.(*jsonSchema), d)
	case *protoSchema:
		return compareProtobuf(r, writer.(*protoSchema), d)
	}
	panic(fmt.Sprintf("schema: compare of unknown parsed type %T", reader))
}

// describe fills a Confluent description template, in which {reader} and
// {writer} stand for the two schemas.
func describe(template string, d direction) string {
	return strings.NewReplacer("{reader}", d.reader, "{writer}", d.writer).Replace(template)
}
