package schema

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/dlclark/regexp2"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// JSON Schema compatibility follows Confluent's JSON Schema diff: the older
// and the newer document are compared keyword by keyword, every difference
// gets a type (Confluent's Difference.Type), and a type outside the
// compatible set below breaks compatibility. The reader of the data is the
// "update", the writer the "original".
//
// The documents are validated (against their draft's meta-schema, references
// resolved) by github.com/santhosh-tekuri/jsonschema/v6, but compared as
// decoded JSON: the compiled *jsonschema.Schema folds keywords together
// (types into a bit set, absent and true additionalProperties alike), and
// Confluent's rules turn on what the document says, such as whether
// additionalProperties is absent, true, false or a schema.
//
// Not compared (a change to them passes): dependencies, dependentRequired,
// dependentSchemas, patternProperties, propertyNames, if/then/else,
// contains, const. A $ref to another document is compared by its URL.

// jsonCompatible holds the difference types that do not break compatibility.
var jsonCompatible = map[string]bool{
	"ID_CHANGED": true, "DESCRIPTION_CHANGED": true, "TITLE_CHANGED": true, "DEFAULT_CHANGED": true,
	"TYPE_EXTENDED": true, "MAX_LENGTH_INCREASED": true, "MAX_LENGTH_REMOVED": true,
	"MIN_LENGTH_DECREASED": true, "MIN_LENGTH_REMOVED": true, "PATTERN_REMOVED": true,
	"MAXIMUM_INCREASED": true, "MAXIMUM_REMOVED": true, "MINIMUM_DECREASED": true, "MINIMUM_REMOVED": true,
	"EXCLUSIVE_MAXIMUM_INCREASED": true, "EXCLUSIVE_MAXIMUM_REMOVED": true,
	"EXCLUSIVE_MINIMUM_DECREASED": true, "EXCLUSIVE_MINIMUM_REMOVED": true,
	"MULTIPLE_OF_REDUCED": true, "MULTIPLE_OF_REMOVED": true,
	"REQUIRED_ATTRIBUTE_WITH_DEFAULT_ADDED": true, "REQUIRED_ATTRIBUTE_REMOVED": true,
	"MAX_PROPERTIES_INCREASED": true, "MAX_PROPERTIES_REMOVED": true,
	"MIN_PROPERTIES_DECREASED": true, "MIN_PROPERTIES_REMOVED": true,
	"ADDITIONAL_PROPERTIES_ADDED": true, "ADDITIONAL_PROPERTIES_EXTENDED": true,
	"PROPERTY_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL":       true,
	"REQUIRED_PROPERTY_WITH_DEFAULT_ADDED_TO_UNOPEN_CONTENT_MODEL": true,
	"OPTIONAL_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL":              true,
	"PROPERTY_REMOVED_FROM_OPEN_CONTENT_MODEL":                     true,
	"PROPERTY_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL":        true,
	"PROPERTY_REMOVED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL":  true,
	"PROPERTY_ADDED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL":    true,
	"MAX_ITEMS_INCREASED": true, "MAX_ITEMS_REMOVED": true, "MIN_ITEMS_DECREASED": true, "MIN_ITEMS_REMOVED": true,
	"UNIQUE_ITEMS_REMOVED": true, "ENUM_ARRAY_EXTENDED": true,
	"ADDITIONAL_ITEMS_ADDED": true, "ITEM_ADDED_TO_CLOSED_CONTENT_MODEL": true,
	"ITEM_REMOVED_FROM_OPEN_CONTENT_MODEL": true, "ITEM_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL": true,
	"SUM_TYPE_EXTENDED": true, "PRODUCT_TYPE_NARROWED": true, "SCHEMA_REMOVED": true,
}

// jsonDescriptions are Confluent's sentences by difference type; %s is the path.
func jsonDescription(typ string) string {
	switch {
	case strings.HasSuffix(typ, "_ADDED") && !strings.Contains(typ, "CONTENT_MODEL"),
		typ == "ADDITIONAL_PROPERTIES_REMOVED", typ == "ADDITIONAL_ITEMS_REMOVED":
		return "The keyword at path '%s' in the {reader} schema is not present in the {writer} schema"
	case strings.HasPrefix(typ, "MIN") && strings.HasSuffix(typ, "_INCREASED"),
		strings.HasPrefix(typ, "EXCLUSIVE_MIN") && strings.HasSuffix(typ, "_INCREASED"),
		typ == "MULTIPLE_OF_EXPANDED":
		return "The value at path '%s' in the {reader} schema is more than its value in the {writer} schema"
	case strings.HasSuffix(typ, "_DECREASED"):
		return "The value at path '%s' in the {reader} schema is less than its value in the {writer} schema"
	case typ == "PATTERN_CHANGED", typ == "MULTIPLE_OF_CHANGED":
		return "The value at path '%s' is different between the {reader} and {writer} schema"
	case strings.HasSuffix(typ, "_NARROWED") && typ != "TYPE_NARROWED":
		return "An array or combined type at path '%s' has fewer elements in the {reader} schema than the {writer} schema"
	case typ == "PRODUCT_TYPE_EXTENDED", typ == "NOT_TYPE_EXTENDED":
		return "An array or combined type at path '%s' has more elements in the {reader} schema than the {writer} schema"
	case typ == "TYPE_CHANGED", typ == "TYPE_NARROWED", typ == "COMBINED_TYPE_CHANGED", typ == "ENUM_ARRAY_CHANGED":
		return "A type at path '%s' is different between the {reader} schema and the {writer} schema"
	case typ == "PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL", typ == "ITEM_ADDED_TO_OPEN_CONTENT_MODEL":
		return "The {reader} schema has an open content model and has a property or item at path '%s' which is missing in the {writer} schema"
	case typ == "REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL":
		return "The {reader} schema has an unopen content model and has a required property at path '%s' which is missing in the {writer} schema"
	case typ == "PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL", typ == "ITEM_REMOVED_FROM_CLOSED_CONTENT_MODEL":
		return "The {reader} has a closed content model and is missing a property or item present at path '%s' in the {writer} schema"
	case typ == "PROPERTY_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL":
		return "A property or item is missing in the {reader} schema but present at path '%s' in the {writer} schema and is not covered by its partially open content model"
	case typ == "PROPERTY_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL":
		return "The {reader} schema has a property or item at path '%s' which is missing in the {writer} schema and is not covered by its partially open content model"
	}
	return "The {reader} schema is not compatible with the {writer} schema at path '%s'"
}

type jsonSchema struct {
	doc any
}

// jsonBase is the URL the document is compiled under; a reference named
// "other.json" resolves to jsonBase's directory.
const (
	jsonBaseDir = "mem://schema/"
	jsonBase    = jsonBaseDir + "main.json"
)

// jsonLoader serves referenced documents to the compiler and refuses every
// other URL, so compiling never reads files or the network. Meta-schemas
// are built into the library and never reach the loader.
type jsonLoader map[string]any

func (l jsonLoader) Load(url string) (any, error) {
	if doc, ok := l[url]; ok {
		return doc, nil
	}
	if doc, ok := l[strings.TrimPrefix(url, jsonBaseDir)]; ok {
		return doc, nil
	}
	// A reference named relative to the document's own $id resolves to an
	// absolute URL that ends with the reference's name.
	for name, doc := range l {
		if strings.HasSuffix(url, "/"+name) {
			return doc, nil
		}
	}
	return nil, fmt.Errorf("%w: %s is not a reference of the schema", ErrReference, url)
}

func decodeJSON(text string) (any, error) {
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(text))
	if err != nil {
		return nil, err
	}
	return doc, nil
}

func parseJSON(s Schema, refs []resolved) (*jsonSchema, error) {
	doc, err := decodeJSON(s.Text)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidSchema, err)
	}
	if depth := jsonDepth(doc, 0); depth > maxDepth {
		return nil, fmt.Errorf("%w: nested deeper than %d", ErrInvalidSchema, maxDepth)
	}
	loader := jsonLoader{}
	for _, ref := range refs {
		refDoc, err := decodeJSON(ref.schema.Text)
		if err != nil {
			return nil, fmt.Errorf("%w: reference %s: %w", ErrInvalidSchema, ref.name, err)
		}
		if jsonDepth(refDoc, 0) > maxDepth {
			return nil, fmt.Errorf("%w: reference %s nested deeper than %d", ErrInvalidSchema, ref.name, maxDepth)
		}
		loader[ref.name] = refDoc
	}
	c := jsonschema.NewCompiler()
	// Draft-07 for documents without $schema, as Confluent's default.
	c.DefaultDraft(jsonschema.Draft7)
	c.UseRegexpEngine(ecmaRegexp)
	c.UseLoader(loader)
	if err := c.AddResource(jsonBase, doc); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidSchema, err)
	}
	if _, err := c.Compile(jsonBase); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidSchema, err)
	}
	return &jsonSchema{doc: doc}, nil
}

// ecmaRegexp compiles "pattern" and "patternProperties" as ECMA-262 regular
// expressions, which JSON Schema specifies and Confluent accepts (lookahead,
// backreferences), where Go's regexp would refuse valid schemas. The
// registry only compiles patterns, never matches data with them; the match
// timeout bounds any later use.
func ecmaRegexp(pattern string) (jsonschema.Regexp, error) {
	re, err := regexp2.Compile(pattern, regexp2.ECMAScript)
	if err != nil {
		return nil, err
	}
	re.MatchTimeout = 100 * time.Millisecond
	return (*ecmaPattern)(re), nil
}

type ecmaPattern regexp2.Regexp

func (p *ecmaPattern) MatchString(s string) bool {
	matched, err := (*regexp2.Regexp)(p).MatchString(s)
	return err == nil && matched
}

func (p *ecmaPattern) String() string { return (*regexp2.Regexp)(p).String() }

// jsonDepth returns how deeply v nests, stopping soon after limit.
func jsonDepth(v any, depth int) int {
	if depth > maxDepth {
		return depth
	}
	deepest := depth
	switch v := v.(type) {
	case map[string]any:
		for _, e := range v {
			deepest = max(deepest, jsonDepth(e, depth+1))
		}
	case []any:
		for _, e := range v {
			deepest = max(deepest, jsonDepth(e, depth+1))
		}
	}
	return deepest
}

func (j *jsonSchema) canonical() (string, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	// encoding/json writes map keys sorted.
	if err := enc.Encode(j.doc); err != nil {
		return "", fmt.Errorf("%w: %w", ErrInvalidSchema, err)
	}
	return strings.TrimSuffix(buf.String(), "\n"), nil
}

type jsonChecker struct {
	d     direction
	found []Incompatibility
	// roots resolve local "#/..." references.
	readerRoot, writerRoot any
}

func compareJSON(reader, writer *jsonSchema, d direction) []Incompatibility {
	c := &jsonChecker{d: d, readerRoot: reader.doc, writerRoot: writer.doc}
	var diffs []jsonDiff
	c.diff(writer.doc, reader.doc, "#", 0, &diffs)
	for _, df := range diffs {
		if jsonCompatible[df.typ] {
			continue
		}
		c.found = append(c.found, Incompatibility{
			Type:        df.typ,
			Path:        df.path,
			Description: describe(fmt.Sprintf(jsonDescription(df.typ), df.path), d),
		})
	}
	return c.found
}

type jsonDiff struct{ typ, path string }

// resolve follows a local reference ("#/definitions/x") within root; other
// references are left as they are and compared as written.
func resolveLocal(v any, root any) any {
	for range 16 {
		m, ok := v.(map[string]any)
		if !ok {
			return v
		}
		ref, ok := m["$ref"].(string)
		if !ok || !strings.HasPrefix(ref, "#") {
			return v
		}
		target := root
		for _, part := range strings.Split(strings.TrimPrefix(ref, "#"), "/") {
			if part == "" {
				continue
			}
			part = strings.NewReplacer("~1", "/", "~0", "~").Replace(part)
			tm, ok := target.(map[string]any)
			if !ok {
				return v
			}
			target = tm[part]
		}
		if target == nil {
			return v
		}
		v = target
	}
	return v
}

// diff appends the differences from original (writer) to update (reader).
func (c *jsonChecker) diff(original, update any, path string, depth int, out *[]jsonDiff) {
	add := func(typ, p string) { *out = append(*out, jsonDiff{typ, p}) }
	if depth > maxDepth {
		add("TYPE_CHANGED", path)
		return
	}
	original, update = resolveLocal(original, c.writerRoot), resolveLocal(update, c.readerRoot)
	if reflectEqual(original, update) {
		return
	}
	ob, oIsBool := original.(bool)
	ub, uIsBool := update.(bool)
	switch {
	case oIsBool && uIsBool:
		if ob && !ub {
			add("TYPE_NARROWED", path)
		}
		return
	case uIsBool:
		if !ub {
			add("TYPE_NARROWED", path)
		}
		return
	case oIsBool:
		if ob && !isEmptySchema(update) {
			add("TYPE_NARROWED", path)
		}
		return
	}
	o, ok1 := original.(map[string]any)
	u, ok2 := update.(map[string]any)
	if !ok1 || !ok2 {
		add("TYPE_CHANGED", path)
		return
	}
	if ref1, ref2 := o["$ref"], u["$ref"]; ref1 != nil || ref2 != nil {
		if ref1 != ref2 {
			add("TYPE_CHANGED", path)
		}
		return
	}
	c.diffCombined(o, u, path, depth, out)
	c.diffTypes(o, u, path, out)
	c.diffEnum(o, u, path, out)
	diffBounds(o, u, path, out)
	diffMultipleOf(o, u, path, out)
	if p1, p2 := o["pattern"], u["pattern"]; p1 != p2 {
		switch {
		case p1 == nil:
			add("PATTERN_ADDED", path+"/pattern")
		case p2 == nil:
			add("PATTERN_REMOVED", path+"/pattern")
		default:
			add("PATTERN_CHANGED", path+"/pattern")
		}
	}
	c.diffObject(o, u, path, depth, out)
	c.diffArray(o, u, path, depth, out)
	if n1, n2 := o["not"], u["not"]; n1 != nil || n2 != nil {
		if !reflectEqual(n1, n2) {
			// Any change to what a reader excludes may exclude data a
			// writer wrote; Confluent reports it as the not type extended.
			add("NOT_TYPE_EXTENDED", path+"/not")
		}
	}
}

func isEmptySchema(v any) bool {
	if b, ok := v.(bool); ok {
		return b
	}
	m, ok := v.(map[string]any)
	return ok && len(m) == 0
}

func reflectEqual(a, b any) bool {
	ja, err1 := json.Marshal(a)
	jb, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && bytes.Equal(ja, jb)
}

// jsonTypes returns the set of types a schema allows; nil means any.
// "integer" counts as within "number".
func jsonTypes(m map[string]any) []string {
	switch t := m["type"].(type) {
	case string:
		return []string{t}
	case []any:
		var out []string
		for _, e := range t {
			if s, ok := e.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}

func typeAllows(set []string, t string) bool {
	if set == nil {
		return true
	}
	return slices.Contains(set, t) || (t == "integer" && slices.Contains(set, "number"))
}

func (c *jsonChecker) diffTypes(o, u map[string]any, path string, out *[]jsonDiff) {
	ot, ut := jsonTypes(o), jsonTypes(u)
	if ot == nil && ut == nil {
		return
	}
	updateCoversOriginal := true
	for _, t := range ot {
		if !typeAllows(ut, t) {
			updateCoversOriginal = false
		}
	}
	if ot == nil && ut != nil {
		updateCoversOriginal = false
	}
	originalCoversUpdate := true
	for _, t := range ut {
		if !typeAllows(ot, t) {
			originalCoversUpdate = false
		}
	}
	switch {
	case updateCoversOriginal && originalCoversUpdate:
	case updateCoversOriginal:
		*out = append(*out, jsonDiff{"TYPE_EXTENDED", path})
	case originalCoversUpdate:
		*out = append(*out, jsonDiff{"TYPE_NARROWED", path})
	default:
		*out = append(*out, jsonDiff{"TYPE_CHANGED", path})
	}
}

func (c *jsonChecker) diffEnum(o, u map[string]any, path string, out *[]jsonDiff) {
	oe, ok1 := o["enum"].([]any)
	ue, ok2 := u["enum"].([]any)
	if !ok1 && !ok2 {
		return
	}
	p := path + "/enum"
	switch {
	case !ok2:
		*out = append(*out, jsonDiff{"ENUM_ARRAY_EXTENDED", p})
		return
	case !ok1:
		*out = append(*out, jsonDiff{"ENUM_ARRAY_NARROWED", p})
		return
	}
	has := func(list []any, v any) bool {
		for _, e := range list {
			if reflectEqual(e, v) {
				return true
			}
		}
		return false
	}
	updateHasAll, originalHasAll := true, true
	for _, v := range oe {
		if !has(ue, v) {
			updateHasAll = false
		}
	}
	for _, v := range ue {
		if !has(oe, v) {
			originalHasAll = false
		}
	}
	switch {
	case updateHasAll && originalHasAll:
	case updateHasAll:
		*out = append(*out, jsonDiff{"ENUM_ARRAY_EXTENDED", p})
	case originalHasAll:
		*out = append(*out, jsonDiff{"ENUM_ARRAY_NARROWED", p})
	default:
		*out = append(*out, jsonDiff{"ENUM_ARRAY_CHANGED", p})
	}
}

// jsonBounds are the numeric keywords: a maximum may grow and a minimum may
// shrink without breaking a reader.
var jsonBounds = []struct {
	keyword, name string
	isMax         bool
}{
	{"maxLength", "MAX_LENGTH", true}, {"minLength", "MIN_LENGTH", false},
	{"maximum", "MAXIMUM", true}, {"minimum", "MINIMUM", false},
	{"exclusiveMaximum", "EXCLUSIVE_MAXIMUM", true}, {"exclusiveMinimum", "EXCLUSIVE_MINIMUM", false},
	{"maxProperties", "MAX_PROPERTIES", true}, {"minProperties", "MIN_PROPERTIES", false},
	{"maxItems", "MAX_ITEMS", true}, {"minItems", "MIN_ITEMS", false},
}

func number(v any) (float64, bool) {
	switch n := v.(type) {
	case json.Number:
		f, err := n.Float64()
		return f, err == nil
	case float64:
		return n, true
	}
	return 0, false
}

func diffBounds(o, u map[string]any, path string, out *[]jsonDiff) {
	for _, b := range jsonBounds {
		ov, ok1 := number(o[b.keyword])
		uv, ok2 := number(u[b.keyword])
		p := path + "/" + b.keyword
		switch {
		case !ok1 && !ok2:
		case !ok1:
			*out = append(*out, jsonDiff{b.name + "_ADDED", p})
		case !ok2:
			*out = append(*out, jsonDiff{b.name + "_REMOVED", p})
		case uv > ov:
			*out = append(*out, jsonDiff{b.name + "_INCREASED", p})
		case uv < ov:
			*out = append(*out, jsonDiff{b.name + "_DECREASED", p})
		}
	}
}

func diffMultipleOf(o, u map[string]any, path string, out *[]jsonDiff) {
	ov, ok1 := number(o["multipleOf"])
	uv, ok2 := number(u["multipleOf"])
	p := path + "/multipleOf"
	switch {
	case !ok1 && !ok2, ok1 && ok2 && ov == uv:
	case !ok1:
		*out = append(*out, jsonDiff{"MULTIPLE_OF_ADDED", p})
	case !ok2:
		*out = append(*out, jsonDiff{"MULTIPLE_OF_REMOVED", p})
	case uv != 0 && isMultiple(ov, uv):
		*out = append(*out, jsonDiff{"MULTIPLE_OF_REDUCED", p})
	case ov != 0 && isMultiple(uv, ov):
		*out = append(*out, jsonDiff{"MULTIPLE_OF_EXPANDED", p})
	default:
		*out = append(*out, jsonDiff{"MULTIPLE_OF_CHANGED", p})
	}
}

func isMultiple(a, b float64) bool {
	q := a / b
	return math.Abs(q-math.Round(q)) < 1e-9
}

// contentModel is how an object schema treats properties it does not name.
type contentModel int

const (
	openContent          contentModel = iota // additionalProperties absent or true
	closedContent                            // additionalProperties false
	partiallyOpenContent                     // additionalProperties a schema
)

func objectContent(m map[string]any) (contentModel, any) {
	ap, ok := m["additionalProperties"]
	if !ok {
		return openContent, nil
	}
	if b, ok := ap.(bool); ok {
		if b {
			return openContent, nil
		}
		return closedContent, nil
	}
	if isEmptySchema(ap) {
		return openContent, nil
	}
	return partiallyOpenContent, ap
}

func stringSet(v any) map[string]bool {
	out := map[string]bool{}
	if list, ok := v.([]any); ok {
		for _, e := range list {
			if s, ok := e.(string); ok {
				out[s] = true
			}
		}
	}
	return out
}

func hasDefault(v any) bool {
	m, ok := v.(map[string]any)
	if !ok {
		return false
	}
	_, ok = m["default"]
	return ok
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func (c *jsonChecker) diffObject(o, u map[string]any, path string, depth int, out *[]jsonDiff) {
	add := func(typ, p string) { *out = append(*out, jsonDiff{typ, p}) }
	oProps, _ := o["properties"].(map[string]any)
	uProps, _ := u["properties"].(map[string]any)
	oModel, oExtra := objectContent(o)
	uModel, uExtra := objectContent(u)
	_, oHasAP := o["additionalProperties"]
	_, uHasAP := u["additionalProperties"]
	if oHasAP || uHasAP {
		p := path + "/additionalProperties"
		switch {
		case oModel != closedContent && uModel == closedContent:
			add("ADDITIONAL_PROPERTIES_REMOVED", p)
		case oModel == closedContent && uModel != closedContent:
			add("ADDITIONAL_PROPERTIES_ADDED", p)
		case oModel == partiallyOpenContent && uModel == partiallyOpenContent:
			c.diff(oExtra, uExtra, p, depth+1, out)
		case oModel == partiallyOpenContent && uModel == openContent:
			add("ADDITIONAL_PROPERTIES_EXTENDED", p)
		case oModel == openContent && uModel == partiallyOpenContent:
			add("ADDITIONAL_PROPERTIES_NARROWED", p)
		}
	}
	oRequired, uRequired := stringSet(o["required"]), stringSet(u["required"])
	for _, name := range sortedKeys(oProps) {
		p := path + "/properties/" + name
		if up, ok := uProps[name]; ok {
			c.diff(oProps[name], up, p, depth+1, out)
			continue
		}
		switch uModel {
		case openContent:
			add("PROPERTY_REMOVED_FROM_OPEN_CONTENT_MODEL", p)
		case closedContent:
			if b, ok := oProps[name].(bool); ok && !b {
				add("PROPERTY_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL", p)
			} else {
				add("PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL", p)
			}
		case partiallyOpenContent:
			if c.covered(oProps[name], uExtra, depth) {
				add("PROPERTY_REMOVED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL", p)
			} else {
				add("PROPERTY_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL", p)
			}
		}
	}
	for _, name := range sortedKeys(uProps) {
		if _, ok := oProps[name]; ok {
			continue
		}
		p := path + "/properties/" + name
		required := uRequired[name]
		switch oModel {
		case openContent:
			if isEmptySchema(uProps[name]) {
				add("PROPERTY_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL", p)
			} else {
				add("PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL", p)
			}
		case closedContent:
			switch {
			case required && hasDefault(uProps[name]):
				add("REQUIRED_PROPERTY_WITH_DEFAULT_ADDED_TO_UNOPEN_CONTENT_MODEL", p)
			case required:
				add("REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL", p)
			default:
				add("OPTIONAL_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL", p)
			}
		case partiallyOpenContent:
			if c.covered(oExtra, uProps[name], depth) {
				add("PROPERTY_ADDED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL", p)
			} else {
				add("PROPERTY_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL", p)
			}
			if required {
				add("REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL", p)
			}
		}
	}
	for _, name := range sortedKeys(anyMap(uRequired)) {
		if oRequired[name] {
			continue
		}
		p := path + "/required/" + name
		if hasDefault(uProps[name]) {
			add("REQUIRED_ATTRIBUTE_WITH_DEFAULT_ADDED", p)
		} else {
			add("REQUIRED_ATTRIBUTE_ADDED", p)
		}
	}
	for _, name := range sortedKeys(anyMap(oRequired)) {
		if !uRequired[name] {
			add("REQUIRED_ATTRIBUTE_REMOVED", path+"/required/"+name)
		}
	}
}

func anyMap(m map[string]bool) map[string]any {
	out := make(map[string]any, len(m))
	for k := range m {
		out[k] = true
	}
	return out
}

// covered reports whether data valid under original is read by update.
func (c *jsonChecker) covered(original, update any, depth int) bool {
	var diffs []jsonDiff
	c.diff(original, update, "#", depth+1, &diffs)
	for _, d := range diffs {
		if !jsonCompatible[d.typ] {
			return false
		}
	}
	return true
}

// tupleItems returns an array schema's positional item schemas and the
// schema of the items after them (nil when absent, which is open): draft-07's
// items array and additionalItems, or 2020-12's prefixItems and items.
func tupleItems(m map[string]any) (prefix []any, rest any, ok bool) {
	if p, isList := m["prefixItems"].([]any); isList {
		return p, m["items"], true
	}
	if p, isList := m["items"].([]any); isList {
		return p, m["additionalItems"], true
	}
	return nil, nil, false
}

// diffTuple compares positional items as Confluent's item rules do, which
// mirror its property rules: an item added to an open tuple or removed
// from a closed one breaks a reader.
func (c *jsonChecker) diffTuple(o, u map[string]any, path string, depth int, out *[]jsonDiff) bool {
	op, oRest, ok1 := tupleItems(o)
	up, uRest, ok2 := tupleItems(u)
	if !ok1 || !ok2 {
		return false
	}
	add := func(typ, p string) { *out = append(*out, jsonDiff{typ, p}) }
	closed := func(rest any) bool { b, isBool := rest.(bool); return isBool && !b }
	for i := range max(len(op), len(up)) {
		p := fmt.Sprintf("%s/items/%d", path, i)
		switch {
		case i < len(op) && i < len(up):
			c.diff(op[i], up[i], p, depth+1, out)
		case i < len(op): // removed in the update
			if closed(uRest) {
				add("ITEM_REMOVED_FROM_CLOSED_CONTENT_MODEL", p)
			} else {
				add("ITEM_REMOVED_FROM_OPEN_CONTENT_MODEL", p)
			}
		default: // added in the update
			if closed(oRest) {
				add("ITEM_ADDED_TO_CLOSED_CONTENT_MODEL", p)
			} else if isEmptySchema(up[i]) {
				add("ITEM_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL", p)
			} else {
				add("ITEM_ADDED_TO_OPEN_CONTENT_MODEL", p)
			}
		}
	}
	switch {
	case oRest == nil && uRest == nil:
	case closed(oRest) && !closed(uRest):
		add("ADDITIONAL_ITEMS_ADDED", path+"/additionalItems")
	case !closed(oRest) && closed(uRest):
		add("ADDITIONAL_ITEMS_REMOVED", path+"/additionalItems")
	case oRest != nil && uRest != nil:
		c.diff(oRest, uRest, path+"/additionalItems", depth+1, out)
	}
	return true
}

func (c *jsonChecker) diffArray(o, u map[string]any, path string, depth int, out *[]jsonDiff) {
	if c.diffTuple(o, u, path, depth, out) {
		return
	}
	oi, ok1 := o["items"]
	ui, ok2 := u["items"]
	switch {
	case ok1 && ok2:
		c.diff(oi, ui, path+"/items", depth+1, out)
	case ok1:
		// No items keyword in the reader: any item is read.
	case ok2:
		if !isEmptySchema(ui) {
			*out = append(*out, jsonDiff{"TYPE_NARROWED", path + "/items"})
		}
	}
	ou, _ := o["uniqueItems"].(bool)
	uu, _ := u["uniqueItems"].(bool)
	if !ou && uu {
		*out = append(*out, jsonDiff{"UNIQUE_ITEMS_ADDED", path + "/uniqueItems"})
	} else if ou && !uu {
		*out = append(*out, jsonDiff{"UNIQUE_ITEMS_REMOVED", path + "/uniqueItems"})
	}
}

// diffCombined compares oneOf, anyOf and allOf: a reader may accept more
// alternatives (a sum type extended) or fewer conjuncts, never the reverse.
func (c *jsonChecker) diffCombined(o, u map[string]any, path string, depth int, out *[]jsonDiff) {
	for _, kw := range []string{"oneOf", "anyOf", "allOf"} {
		os, ok1 := o[kw].([]any)
		us, ok2 := u[kw].([]any)
		if !ok1 && !ok2 {
			continue
		}
		p := path + "/" + kw
		if ok1 != ok2 {
			*out = append(*out, jsonDiff{"COMBINED_TYPE_CHANGED", p})
			continue
		}
		sum := kw != "allOf"
		switch {
		case len(us) > len(os) && sum:
			*out = append(*out, jsonDiff{"SUM_TYPE_EXTENDED", p})
		case len(us) < len(os) && sum:
			*out = append(*out, jsonDiff{"SUM_TYPE_NARROWED", p})
		case len(us) > len(os):
			*out = append(*out, jsonDiff{"PRODUCT_TYPE_EXTENDED", p})
		case len(us) < len(os):
			*out = append(*out, jsonDiff{"PRODUCT_TYPE_NARROWED", p})
		}
		for i := 0; i < len(os) && i < len(us); i++ {
			c.diff(os[i], us[i], fmt.Sprintf("%s/%d", p, i), depth+1, out)
		}
	}
}
