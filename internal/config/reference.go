package config

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// ReferenceMarkdown renders the configuration tables as the README's
// configuration reference, so the two cannot drift (a test compares them).
func ReferenceMarkdown() string {
	var b strings.Builder
	b.WriteString("### Broker keys\n\n")
	b.WriteString("| key | type | default | dynamic | description |\n|---|---|---|---|---|\n")
	for _, k := range ServerKeys {
		def := k.Default
		if def == "" {
			def = "(unset)"
		}
		name := "`" + k.Name + "`"
		if k.Strata {
			name += " (Strata)"
		}
		dyn := ""
		switch {
		case k.PerBroker:
			dyn = "per broker"
		case k.Dynamic:
			dyn = "yes"
		}
		doc := k.Doc
		if len(k.OneOf) > 0 {
			doc += " One of: " + strings.Join(k.OneOf, ", ") + "."
		}
		if k.Topic != "" {
			doc += fmt.Sprintf(" Default of the topic key `%s`.", k.Topic)
		}
		fmt.Fprintf(&b, "| %s | %s | `%s` | %s | %s |\n", name, strings.ToLower(k.Type.String()), def, dyn, escapePipes(doc))
	}
	b.WriteString("\n### Topic keys\n\n")
	b.WriteString("Set with `strata topic create -c key=value`, `strata topic alter-config --set key=value`, or any Kafka admin client. Their defaults come from the broker keys above.\n\n")
	b.WriteString("| key | type | default | description |\n|---|---|---|---|\n")
	for _, k := range TopicKeys {
		fmt.Fprintf(&b, "| `%s` | %s | `%s` | %s |\n", k.Name, strings.ToLower(k.Type.String()), k.Default, escapePipes(k.Doc))
	}
	b.WriteString("\n### Accepted and ignored\n\nThese Kafka keys are accepted without effect, with a warning at start-up:\n\n")
	for _, name := range sortedKeys(IgnoredServerKeys) {
		fmt.Fprintf(&b, "- `%s`: %s\n", name, IgnoredServerKeys[name])
	}
	return b.String()
}

func escapePipes(s string) string { return strings.ReplaceAll(s, "|", "\\|") }

func sortedKeys(m map[string]string) []string {
	return slices.Sorted(maps.Keys(m))
}
