package schema

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/bufbuild/protocompile"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Protobuf compatibility follows Confluent's Protobuf diff: messages are
// matched by name (relative to the package) and fields by number, every
// difference gets a type, and these types break compatibility. The reader is
// the "update", the writer the "original".
const (
	protoMessageRemoved        = "MESSAGE_REMOVED"
	protoFieldKindChanged      = "FIELD_KIND_CHANGED"
	protoFieldScalarKind       = "FIELD_SCALAR_KIND_CHANGED"
	protoFieldNamedType        = "FIELD_NAMED_TYPE_CHANGED"
	protoRequiredFieldAdded    = "REQUIRED_FIELD_ADDED"
	protoRequiredFieldRemoved  = "REQUIRED_FIELD_REMOVED"
	protoOneofFieldRemoved     = "ONEOF_FIELD_REMOVED"
	protoFieldsMovedToOneof    = "MULTIPLE_FIELDS_MOVED_TO_ONEOF"
	protoFieldMovedToOldOneof  = "FIELD_MOVED_TO_EXISTING_ONEOF"
	protoMainFile              = "schema.proto"
	protoMaxMessagesCompared   = 1 << 14
	protoDescriptionNotDefined = "The {reader} schema is not compatible with the {writer} schema at path '%s'"
)

var protoDescriptions = map[string]string{
	protoMessageRemoved:       "The {reader} schema is missing a field of type MESSAGE at path '%s' in the {writer} schema",
	protoFieldKindChanged:     "The type of a field at path '%s' in the {reader} schema does not match the {writer} schema",
	protoFieldScalarKind:      "The kind of a SCALAR field at path '%s' in the {reader} schema does not match its kind in the {writer} schema",
	protoFieldNamedType:       "The type of a MESSAGE field at path '%s' in the {reader} schema does not match its type in the {writer} schema",
	protoRequiredFieldAdded:   "A required field at path '%s' in the {reader} schema is missing in the {writer} schema",
	protoRequiredFieldRemoved: "The {reader} schema is missing a required field at path '%s' in the {writer} schema",
	protoOneofFieldRemoved:    "The {reader} schema is missing a oneof field at path '%s' in the {writer} schema",
	protoFieldsMovedToOneof:   "Multiple fields in the oneof at path '%s' in the {reader} schema are outside a oneof in the {writer} schema",
	protoFieldMovedToOldOneof: "A field at path '%s' in the {reader} schema is in a oneof that in the {writer} schema does not hold it",
}

type protoSchema struct {
	file protoreflect.FileDescriptor
}

// parseProtobuf compiles s with protocompile. References are served as the
// files their names import; the well-known types (google/protobuf/*.proto)
// come with the compiler; any other import fails, so compiling never reads
// the file system.
func parseProtobuf(s Schema, refs []resolved) (p *protoSchema, err error) {
	files := map[string]string{protoMainFile: s.Text}
	for _, ref := range refs {
		if ref.name == protoMainFile {
			return nil, fmt.Errorf("%w: a reference may not be named %s", ErrReference, protoMainFile)
		}
		files[ref.name] = ref.schema.Text
	}
	compiler := protocompile.Compiler{
		Resolver: protocompile.WithStandardImports(&protocompile.SourceResolver{
			Accessor: func(path string) (io.ReadCloser, error) {
				text, ok := files[path]
				if !ok {
					return nil, fmt.Errorf("%w: import %q is not a reference of the schema", ErrReference, path)
				}
				return io.NopCloser(strings.NewReader(text)), nil
			},
		}),
		SourceInfoMode: protocompile.SourceInfoNone,
	}
	compiled, err := compiler.Compile(context.Background(), protoMainFile)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidSchema, err)
	}
	return &protoSchema{file: compiled[0]}, nil
}

func (p *protoSchema) canonical() (string, error) {
	fd := protodesc.ToFileDescriptorProto(p.file)
	fd.SourceCodeInfo = nil
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(fd)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrInvalidSchema, err)
	}
	return base64.StdEncoding.EncodeToString(b), nil
}

type protoChecker struct {
	d                        direction
	found                    []Incompatibility
	readerPackage, writerPkg string
	compared                 int
}

func compareProtobuf(reader, writer *protoSchema, d direction) []Incompatibility {
	c := &protoChecker{d: d, readerPackage: string(reader.file.Package()), writerPkg: string(writer.file.Package())}
	c.messages(reader.file.Messages(), writer.file.Messages(), "#")
	return c.found
}

func (c *protoChecker) add(typ, path string) {
	desc, ok := protoDescriptions[typ]
	if !ok {
		desc = protoDescriptionNotDefined
	}
	c.found = append(c.found, Incompatibility{Type: typ, Path: path, Description: describe(fmt.Sprintf(desc, path), c.d)})
}

// messages compares the writer's messages with the reader's of one name; a
// message the reader lacks breaks it, one it adds does not.
func (c *protoChecker) messages(reader, writer protoreflect.MessageDescriptors, path string) {
	for i := range writer.Len() {
		w := writer.Get(i)
		if w.IsMapEntry() {
			continue
		}
		p := path + "/" + string(w.Name())
		r := reader.ByName(w.Name())
		if r == nil {
			c.add(protoMessageRemoved, p)
			continue
		}
		c.message(r, w, p)
	}
}

func (c *protoChecker) message(reader, writer protoreflect.MessageDescriptor, path string) {
	c.compared++
	if c.compared > protoMaxMessagesCompared {
		return
	}
	c.messages(reader.Messages(), writer.Messages(), path)
	rf, wf := reader.Fields(), writer.Fields()
	for i := range wf.Len() {
		w := wf.Get(i)
		p := path + "/" + strconv.Itoa(int(w.Number()))
		r := rf.ByNumber(w.Number())
		if r == nil {
			if w.Cardinality() == protoreflect.Required {
				c.add(protoRequiredFieldRemoved, p)
			}
			continue
		}
		c.field(r, w, p)
	}
	for i := range rf.Len() {
		r := rf.Get(i)
		if wf.ByNumber(r.Number()) == nil && r.Cardinality() == protoreflect.Required {
			c.add(protoRequiredFieldAdded, path+"/"+strconv.Itoa(int(r.Number())))
		}
	}
	c.oneofs(reader, writer, path)
}

// oneofs applies Confluent's oneof rules, ignoring proto3's synthetic oneofs
// of optional fields.
func (c *protoChecker) oneofs(reader, writer protoreflect.MessageDescriptor, path string) {
	ro, wo := reader.Oneofs(), writer.Oneofs()
	for i := range wo.Len() {
		w := wo.Get(i)
		if w.IsSynthetic() {
			continue
		}
		r := ro.ByName(w.Name())
		for j := range w.Fields().Len() {
			f := w.Fields().Get(j)
			if r == nil || r.Fields().ByNumber(f.Number()) == nil {
				c.add(protoOneofFieldRemoved, path+"/"+strconv.Itoa(int(f.Number())))
			}
		}
	}
	for i := range ro.Len() {
		r := ro.Get(i)
		if r.IsSynthetic() {
			continue
		}
		existed := wo.ByName(r.Name()) != nil
		moved := 0
		for j := range r.Fields().Len() {
			f := r.Fields().Get(j)
			w := writer.Fields().ByNumber(f.Number())
			if w == nil || (w.ContainingOneof() != nil && !w.ContainingOneof().IsSynthetic()) {
				continue
			}
			moved++
			if existed {
				c.add(protoFieldMovedToOldOneof, path+"/"+strconv.Itoa(int(f.Number())))
			}
		}
		if !existed && moved > 1 {
			c.add(protoFieldsMovedToOneof, path+"/"+string(r.Name()))
		}
	}
}

// kind groups of scalar types whose encodings read each other, as
// Confluent's FIELD_NUMERIC_LABEL_CHANGED and
// FIELD_STRING_OR_BYTES_LABEL_CHANGED allow.
func scalarGroup(k protoreflect.Kind) string {
	switch k {
	case protoreflect.Int32Kind, protoreflect.Uint32Kind, protoreflect.Int64Kind, protoreflect.Uint64Kind, protoreflect.BoolKind:
		return "varint"
	case protoreflect.Sint32Kind, protoreflect.Sint64Kind:
		return "zigzag"
	case protoreflect.Fixed32Kind, protoreflect.Sfixed32Kind:
		return "fixed32"
	case protoreflect.Fixed64Kind, protoreflect.Sfixed64Kind:
		return "fixed64"
	case protoreflect.StringKind, protoreflect.BytesKind:
		return "length"
	}
	return k.String()
}

func fieldKind(f protoreflect.FieldDescriptor) string {
	switch {
	case f.IsMap():
		return "map"
	case f.Kind() == protoreflect.MessageKind || f.Kind() == protoreflect.GroupKind:
		return "message"
	case f.Kind() == protoreflect.EnumKind:
		return "enum"
	}
	return "scalar"
}

// relativeName names a type without its file's package, so that moving a
// schema to another package does not change every field's type.
func relativeName(full protoreflect.FullName, pkg string) string {
	if pkg == "" {
		return string(full)
	}
	return strings.TrimPrefix(string(full), pkg+".")
}

func (c *protoChecker) field(reader, writer protoreflect.FieldDescriptor, path string) {
	rk, wk := fieldKind(reader), fieldKind(writer)
	if rk != wk {
		c.add(protoFieldKindChanged, path)
		return
	}
	switch rk {
	case "scalar":
		if scalarGroup(reader.Kind()) != scalarGroup(writer.Kind()) {
			c.add(protoFieldScalarKind, path)
		}
	case "message":
		if relativeName(reader.Message().FullName(), c.readerPackage) != relativeName(writer.Message().FullName(), c.writerPkg) {
			c.add(protoFieldNamedType, path)
		}
	case "enum":
		if relativeName(reader.Enum().FullName(), c.readerPackage) != relativeName(writer.Enum().FullName(), c.writerPkg) {
			c.add(protoFieldNamedType, path)
		}
	case "map":
		c.field(reader.MapKey(), writer.MapKey(), path+"/key")
		c.field(reader.MapValue(), writer.MapValue(), path+"/value")
	}
}
