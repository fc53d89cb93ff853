package config

import (
	"fmt"
	"strconv"
)

// TopicDefaults returns the default value of every topic key on this broker:
// the broker key that supplies it (log.retention.ms for retention.ms, with
// Kafka's precedence rules) or the topic key's own default.
func (s *Server) TopicDefaults() map[string]string {
	out := make(map[string]string, len(TopicKeys))
	for _, k := range TopicKeys {
		out[k.Name] = k.Default
	}
	for _, k := range ServerKeys {
		if k.Topic == "" {
			continue
		}
		switch k.Topic {
		case "retention.ms":
			out[k.Topic] = strconv.FormatInt(s.RetentionMs(), 10)
		case "segment.ms":
			out[k.Topic] = strconv.FormatInt(s.RollMs(), 10)
		case "flush.ms":
			out[k.Topic] = strconv.FormatInt(s.FlushMs(), 10)
		default:
			out[k.Topic] = s.String(k.Name)
		}
	}
	return out
}

// ValidateTopicConfig checks one topic-level override, as CreateTopics and
// AlterConfigs do. It returns an error wrapping ErrInvalid, or ErrUnknownKey.
func ValidateTopicConfig(name, value string) error {
	k, ok := topicIndex[name]
	if !ok {
		return fmt.Errorf("%w: %s", ErrUnknownKey, name)
	}
	return k.Validate(value)
}

// ErrUnknownKey is returned for a topic key Strata does not know.
var ErrUnknownKey = fmt.Errorf("config: unknown topic configuration key")

// Topic is a topic's effective configuration: the broker defaults with the
// topic's overrides applied.
type Topic struct {
	values map[string]string
}

// ResolveTopic applies overrides to defaults. Overrides were validated when
// they were set; an invalid one (from an older version) falls back to the
// default.
func ResolveTopic(defaults, overrides map[string]string) Topic {
	t := Topic{values: make(map[string]string, len(defaults))}
	for k, v := range defaults {
		t.values[k] = v
	}
	for k, v := range overrides {
		if ValidateTopicConfig(k, v) == nil {
			t.values[k] = v
		}
	}
	return t
}

// String returns a key's value.
func (t Topic) String(name string) string { return t.values[name] }

// Int returns an integer key's value.
func (t Topic) Int(name string) int64 {
	v, _ := strconv.ParseInt(t.values[name], 10, 64)
	return v
}

// Float returns a double key's value.
func (t Topic) Float(name string) float64 {
	v, _ := strconv.ParseFloat(t.values[name], 64)
	return v
}

// Bool returns a boolean key's value.
func (t Topic) Bool(name string) bool { return t.values[name] == "true" }
