// Package config holds Strata's server and topic configuration, with Apache
// Kafka's key names, types and defaults.
//
// A server configuration is assembled, lowest precedence first, from the
// defaults in ServerKeys, a server.properties file, environment variables
// (STRATA_LOG_DIRS or KAFKA_LOG_DIRS for log.dirs, mapped as Kafka's Docker
// images map them) and --set key=value flags. Unknown keys produce warnings;
// a value that does not parse or is out of range stops the start with an
// error naming the key.
package config

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// ErrInvalid is wrapped by every error about a bad configuration value.
var ErrInvalid = errors.New("config: invalid value")

// Source says where a value came from, in DescribeConfigs' terms.
type Source int8

// Sources, lowest precedence first.
const (
	SourceDefault Source = iota
	SourceFile
	SourceEnv
	SourceFlag
	SourceDynamic
)

var serverIndex = indexKeys(ServerKeys)
var topicIndex = indexKeys(TopicKeys)

func indexKeys(keys []Key) map[string]*Key {
	m := make(map[string]*Key, len(keys))
	for i := range keys {
		m[keys[i].Name] = &keys[i]
	}
	return m
}

// LookupServer returns the broker key of the given name.
func LookupServer(name string) (*Key, bool) { k, ok := serverIndex[name]; return k, ok }

// LookupTopic returns the topic key of the given name.
func LookupTopic(name string) (*Key, bool) { k, ok := topicIndex[name]; return k, ok }

// Server is a validated server configuration. Its zero value is not usable;
// build one with NewServer or Load.
type Server struct {
	values   map[string]string
	sources  map[string]Source
	Warnings []string // unknown keys and ignored settings, for the start-up log
}

// NewServer returns the default configuration with the given overrides
// applied as if they were --set flags.
func NewServer(overrides map[string]string) (*Server, error) {
	s := &Server{values: map[string]string{}, sources: map[string]Source{}}
	keys := make([]string, 0, len(overrides))
	for k := range overrides {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if err := s.Set(k, overrides[k], SourceFlag); err != nil {
			return nil, err
		}
	}
	return s, s.check()
}

// LoadOptions says where Load reads from.
type LoadOptions struct {
	File    string   // a server.properties file, or ""
	Sets    []string // key=value pairs from --set
	Environ []string // os.Environ(), or nil to ignore the environment
}

// Load assembles a server configuration from defaults, file, environment
// and flags, in that order of precedence.
func Load(opts LoadOptions) (*Server, error) {
	s := &Server{values: map[string]string{}, sources: map[string]Source{}}
	if opts.File != "" {
		f, err := os.Open(opts.File)
		if err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
		props, err := ParseProperties(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("config: %s: %w", opts.File, err)
		}
		for _, kv := range props {
			if err := s.Set(kv[0], kv[1], SourceFile); err != nil {
				return nil, err
			}
		}
	}
	for _, kv := range EnvOverrides(opts.Environ) {
		if err := s.Set(kv[0], kv[1], SourceEnv); err != nil {
			return nil, err
		}
	}
	for _, set := range opts.Sets {
		k, v, ok := strings.Cut(set, "=")
		if !ok {
			return nil, fmt.Errorf("%w: --set %q: want key=value", ErrInvalid, set)
		}
		if err := s.Set(strings.TrimSpace(k), strings.TrimSpace(v), SourceFlag); err != nil {
			return nil, err
		}
	}
	return s, s.check()
}

// Set validates and sets one key. Unknown keys are kept (DescribeConfigs
// does not show them) with a warning.
func (s *Server) Set(name, value string, src Source) error {
	k, ok := serverIndex[name]
	if !ok && strings.HasPrefix(name, listenerPrefix) {
		return s.setListenerKey(name, value, src)
	}
	if !ok {
		if why, ignored := IgnoredServerKeys[name]; ignored {
			s.Warnings = append(s.Warnings, fmt.Sprintf("%s is ignored: %s", name, why))
		} else {
			s.Warnings = append(s.Warnings, fmt.Sprintf("unknown configuration key %s", name))
		}
		return nil
	}
	if err := k.Validate(value); err != nil {
		return err
	}
	s.values[name] = value
	s.sources[name] = src
	return nil
}

// check validates combinations of keys.
func (s *Server) check() error {
	if _, err := ParseListeners(s.List("listeners")); err != nil {
		return err
	}
	if adv := s.List("advertised.listeners"); len(adv) > 0 {
		if _, err := ParseListeners(adv); err != nil {
			return err
		}
	}
	if len(s.LogDirs()) == 0 {
		return fmt.Errorf("%w: log.dirs: empty", ErrInvalid)
	}
	_, err := s.Cluster()
	return err
}

// Validate reports whether value is acceptable for the key.
func (k *Key) Validate(value string) error {
	bad := func(why string) error {
		return fmt.Errorf("%w: %s=%q: %s", ErrInvalid, k.Name, value, why)
	}
	if value == "" && k.Type != TypeString && k.Type != TypeList {
		return bad("empty")
	}
	var n float64
	switch k.Type {
	case TypeInt:
		v, err := strconv.ParseInt(value, 10, 32)
		if err != nil {
			return bad("not a 32-bit integer")
		}
		n = float64(v)
	case TypeLong:
		v, err := strconv.ParseInt(value, 10, 64)
		if err != nil {
			return bad("not a 64-bit integer")
		}
		n = float64(v)
	case TypeDouble:
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			return bad("not a number")
		}
		n = v
	case TypeBool:
		if _, err := strconv.ParseBool(value); err != nil || (value != "true" && value != "false") {
			return bad("not true or false")
		}
	case TypeString:
		if len(k.OneOf) > 0 && !slices.Contains(k.OneOf, value) {
			return bad("must be one of " + strings.Join(k.OneOf, ", "))
		}
	case TypeList:
		for _, v := range SplitList(value) {
			if len(k.OneOf) > 0 && !slices.Contains(k.OneOf, v) {
				return bad(fmt.Sprintf("%q is not one of %s", v, strings.Join(k.OneOf, ", ")))
			}
		}
	}
	if k.Min < k.Max && (n < k.Min || n > k.Max) {
		return bad(fmt.Sprintf("out of range [%v, %v]", k.Min, k.Max))
	}
	if k.Check != nil {
		if err := k.Check(value); err != nil {
			return bad(err.Error())
		}
	}
	return nil
}

// Value returns a key's effective value and its source.
func (s *Server) Value(name string) (string, Source) {
	if v, ok := s.values[name]; ok {
		return v, s.sources[name]
	}
	if k, ok := serverIndex[name]; ok {
		return k.Default, SourceDefault
	}
	return "", SourceDefault
}

// String returns a string key's value.
func (s *Server) String(name string) string { v, _ := s.Value(name); return v }

// Int returns an integer key's value (0 if unset with no default).
func (s *Server) Int(name string) int64 {
	v, _ := strconv.ParseInt(s.String(name), 10, 64)
	return v
}

// Bool returns a boolean key's value.
func (s *Server) Bool(name string) bool { return s.String(name) == "true" }

// List returns a list key's entries, trimmed, without empty ones.
func (s *Server) List(name string) []string { return SplitList(s.String(name)) }

// IsSet reports whether a key was given explicitly.
func (s *Server) IsSet(name string) bool { _, ok := s.values[name]; return ok }

// SplitList splits a comma-separated list value.
func SplitList(v string) []string {
	var out []string
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// LogDirs returns log.dirs, or log.dir when log.dirs is not given, as Kafka
// does.
func (s *Server) LogDirs() []string {
	if !s.IsSet("log.dirs") && s.IsSet("log.dir") {
		return SplitList(s.String("log.dir"))
	}
	return s.List("log.dirs")
}

// RetentionMs applies Kafka's precedence: log.retention.ms, then
// log.retention.minutes, then log.retention.hours. Negative means forever.
func (s *Server) RetentionMs() int64 {
	if s.IsSet("log.retention.ms") {
		return s.Int("log.retention.ms")
	}
	if s.IsSet("log.retention.minutes") {
		m := s.Int("log.retention.minutes")
		if m < 0 {
			return -1
		}
		return m * 60_000
	}
	h := s.Int("log.retention.hours")
	if h < 0 {
		return -1
	}
	return h * 3_600_000
}

// RollMs applies Kafka's precedence: log.roll.ms, then log.roll.hours.
func (s *Server) RollMs() int64 {
	if s.IsSet("log.roll.ms") {
		return s.Int("log.roll.ms")
	}
	return s.Int("log.roll.hours") * 3_600_000
}

// FlushMs is log.flush.interval.ms, or never when unset.
func (s *Server) FlushMs() int64 {
	if s.IsSet("log.flush.interval.ms") {
		return s.Int("log.flush.interval.ms")
	}
	return maxInt64
}

// Effective lists every known key with its effective value and source, in
// table order, for the start-up log and DescribeConfigs.
func (s *Server) Effective() []Setting {
	out := make([]Setting, 0, len(ServerKeys))
	for i := range ServerKeys {
		k := &ServerKeys[i]
		v, src := s.Value(k.Name)
		out = append(out, Setting{Key: k, Value: v, Source: src})
	}
	return out
}

// Setting is a key with its effective value.
type Setting struct {
	Key    *Key
	Value  string
	Source Source
}

// ParseProperties reads a Java .properties file: key=value or key: value
// lines, # and ! comments, backslash line continuation.
func ParseProperties(r io.Reader) ([][2]string, error) {
	var out [][2]string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var pending string
	lineNo := 0
	for sc.Scan() {
		lineNo++
		line := strings.TrimSpace(sc.Text())
		if pending == "" && (line == "" || line[0] == '#' || line[0] == '!') {
			continue
		}
		if strings.HasSuffix(line, "\\") {
			pending += strings.TrimSuffix(line, "\\")
			continue
		}
		line = pending + line
		pending = ""
		i := strings.IndexAny(line, "=:")
		if i < 0 {
			return nil, fmt.Errorf("line %d: %w: want key=value", lineNo, ErrInvalid)
		}
		out = append(out, [2]string{strings.TrimSpace(line[:i]), strings.TrimSpace(line[i+1:])})
	}
	return out, sc.Err()
}

// EnvOverrides maps STRATA_* and KAFKA_* environment variables to keys the
// way Kafka's Docker images do: strip the prefix, lower-case, "___" becomes
// "-", "__" becomes "_", "_" becomes ".". KAFKA_OPTS-style variables that
// are not configuration (KAFKA_HEAP_OPTS, ...) are skipped. STRATA_BROKERS is
// the CLI's and is skipped too.
func EnvOverrides(environ []string) [][2]string {
	var out [][2]string
	for _, kv := range environ {
		name, value, ok := strings.Cut(kv, "=")
		if !ok {
			continue
		}
		var rest string
		switch {
		case strings.HasPrefix(name, "STRATA_"):
			rest = strings.TrimPrefix(name, "STRATA_")
		case strings.HasPrefix(name, "KAFKA_"):
			rest = strings.TrimPrefix(name, "KAFKA_")
		default:
			continue
		}
		if rest == "" || rest == "OPTS" || strings.HasSuffix(rest, "_OPTS") || rest == "BROKERS" || rest == "VERSION" || rest == "HOME" {
			continue
		}
		key := strings.ToLower(rest)
		key = strings.ReplaceAll(key, "___", "\x00")
		key = strings.ReplaceAll(key, "__", "\x01")
		key = strings.ReplaceAll(key, "_", ".")
		key = strings.ReplaceAll(key, "\x00", "-")
		key = strings.ReplaceAll(key, "\x01", "_")
		out = append(out, [2]string{key, value})
	}
	sort.Slice(out, func(i, j int) bool { return out[i][0] < out[j][0] })
	return out
}
