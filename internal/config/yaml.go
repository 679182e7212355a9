package config

import (
	"bytes"
	"fmt"
	"maps"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/events"
	"github.com/sandgate/sandgate/internal/webhook"
)

// deerflowKeys maps DeerFlow's `sandbox:` keys onto ours.
var deerflowKeys = map[string]string{
	"idle_timeout":        "idle_timeout",
	"replicas":            "max_sandboxes",
	"mounts":              "mounts",
	"environment":         "environment",
	"image":               "image",
	"port":                "port",
	"container_prefix":    "container_prefix",
	"provisioner_url":     "provisioner_url",
	"provisioner_api_key": "provisioner_api_key",
}

// deerflowIgnored are DeerFlow keys with no meaning here (logged, not errors).
var deerflowIgnored = map[string]string{
	"use":        "Sandgate is the provider",
	"auto_start": "sandboxes always start on demand",
	"base_port":  "ports are chosen by the kernel/engine, never scanned",
}

// structuredKeys are the top-level YAML-only keys, decoded through yamlFile.
var structuredKeys = []string{"mounts", "environment", "labels", "templates", "webhook_endpoints"}

// yamlFile holds what does not fit a scalar setting.
type yamlFile struct {
	Mounts      []backend.Mount   `yaml:"mounts"`
	Environment map[string]string `yaml:"environment"`
	Labels      map[string]string `yaml:"labels"`
	Templates   []TemplateConfig  `yaml:"templates"`
	// WebhookEndpoints: id, url, events, secret ($VAR expanded from the
	// gateway's environment, so the file need not hold it).
	WebhookEndpoints []webhookEndpointYAML `yaml:"webhook_endpoints"`
}

type webhookEndpointYAML struct {
	ID     string   `yaml:"id"`
	URL    string   `yaml:"url"`
	Events []string `yaml:"events"`
	Secret string   `yaml:"secret"`
}

// yamlValue is one value of the file: key is the setting's flat YAML name
// (or a structured key), spelling the path it was written under.
type yamlValue struct {
	spelling, key string
	value         any
}

// yamlKeys resolves every spelling of a setting: flat (idle_timeout),
// nested under its section (pool: {idle_timeout}) and, as before
// sections, any nesting whose keys joined by "_" give the flat name
// (kubernetes: {node_host}, auth: {jwt: {issuer}}).
type yamlKeys struct {
	flat, nested map[string]setting
}

func newYAMLKeys(sections []section) yamlKeys {
	k := yamlKeys{flat: map[string]setting{}, nested: map[string]setting{}}
	for _, sec := range sections {
		for _, s := range sec.settings {
			k.flat[s.yamlName()] = s
			k.nested[sec.nestedKeyOf(s)] = s
		}
	}
	return k
}

func (k yamlKeys) lookup(path string) (setting, bool) {
	if s, ok := k.nested[path]; ok {
		return s, true
	}
	s, ok := k.flat[strings.ReplaceAll(path, ".", "_")]
	return s, ok
}

// collect appends the values under m to given and returns a warning for
// each key no setting has. A map descends unless its path names a setting
// that takes a map (kubernetes: {node_selector: {pool: sandbox}}).
func (k yamlKeys) collect(prefix string, m map[string]any, given *[]yamlValue) []string {
	var warnings []string
	for _, key := range slices.Sorted(maps.Keys(m)) {
		v, path := m[key], key
		if prefix != "" {
			path = prefix + "." + key
		}
		if prefix == "" && slices.Contains(structuredKeys, key) {
			*given = append(*given, yamlValue{path, key, v})
			continue
		}
		s, known := k.lookup(path)
		if sub, ok := v.(map[string]any); ok && !(known && takesMap(s)) {
			warnings = append(warnings, k.collect(path, sub, given)...)
			continue
		}
		if !known {
			warnings = append(warnings, path+": not used by this gateway, ignored")
			continue
		}
		*given = append(*given, yamlValue{path, s.yamlName(), v})
	}
	return warnings
}

func takesMap(s setting) bool {
	_, ok := s.value.(*mapValue)
	return ok
}

// applyYAML sets what the file gives, except the settings given by flag.
// A setting given twice in the file (flat and nested, or DeerFlow's
// sandbox: block and ours) is an error naming both spellings: neither
// silently wins.
func (c *Config) applyYAML(path string, sections []section, fromFlag map[string]bool, lookupEnv func(string) (string, bool)) ([]string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config file: %w", err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("config file %s: %w", path, err)
	}
	var given []yamlValue
	var warnings []string
	if sb, ok := doc["sandbox"].(map[string]any); ok {
		delete(doc, "sandbox")
		for _, k := range slices.Sorted(maps.Keys(sb)) {
			if ours, ok := deerflowKeys[k]; ok {
				given = append(given, yamlValue{"sandbox." + k, ours, sb[k]})
			} else if why, ok := deerflowIgnored[k]; ok {
				warnings = append(warnings, fmt.Sprintf("sandbox.%s ignored: %s", k, why))
			} else {
				warnings = append(warnings, fmt.Sprintf("sandbox.%s: unknown DeerFlow key, ignored", k))
			}
		}
	}
	keys := newYAMLKeys(sections)
	warnings = append(warnings, keys.collect("", doc, &given)...)

	sort.Slice(given, func(i, j int) bool { return given[i].spelling < given[j].spelling })
	seen := map[string]string{}
	for _, g := range given {
		if first, ok := seen[g.key]; ok {
			return nil, fmt.Errorf("config file %s: %s and %s are the same setting (%s): give it once", path, first, g.spelling, g.key)
		}
		seen[g.key] = g.spelling
	}

	// Structured keys decode through their own types.
	var structured yamlFile
	part := map[string]any{}
	for _, g := range given {
		if slices.Contains(structuredKeys, g.key) {
			part[g.key] = g.value
		}
	}
	if len(part) > 0 {
		b, _ := yaml.Marshal(part)
		// Strict: a misspelt template field must not silently mean its default.
		dec := yaml.NewDecoder(bytes.NewReader(b))
		dec.KnownFields(true)
		if err := dec.Decode(&structured); err != nil {
			return nil, fmt.Errorf("config file %s: mounts/environment/labels/templates/webhook_endpoints: %w", path, err)
		}
	}
	c.Pool.Mounts.Extra = append(c.Pool.Mounts.Extra, structured.Mounts...)
	if len(structured.Environment) > 0 {
		c.Pool.Env = resolveEnv(structured.Environment, lookupEnv)
	}
	if len(structured.Labels) > 0 {
		c.Pool.Labels = structured.Labels
	}
	c.Templates = structured.Templates
	c.Webhooks.Endpoints = nil
	for _, w := range structured.WebhookEndpoints {
		e := webhook.Endpoint{ID: w.ID, URL: w.URL, Secret: expandEnv(w.Secret, lookupEnv)}
		for _, t := range w.Events {
			e.Events = append(e.Events, events.Type(t))
		}
		c.Webhooks.Endpoints = append(c.Webhooks.Endpoints, e)
	}
	c.Pool.Templates = nil
	for _, t := range structured.Templates {
		pt, err := t.poolTemplate(lookupEnv)
		if err != nil {
			return nil, fmt.Errorf("config file %s: %w", path, err)
		}
		c.Pool.Templates = append(c.Pool.Templates, pt)
	}

	for _, g := range given {
		s, ok := keys.flat[g.key]
		if !ok || fromFlag[s.name] {
			continue
		}
		if err := s.value.Set(scalar(g.value)); err != nil {
			return nil, fmt.Errorf("config file %s: %s: %w", path, g.spelling, err)
		}
	}
	return warnings, nil
}

func scalar(v any) string {
	switch t := v.(type) {
	case nil:
		return ""
	case time.Duration:
		return t.String()
	case map[string]any: // a YAML map for a map setting: kubernetes_node_selector: {pool: sandbox}
		items := make([]string, 0, len(t))
		for k, v := range t {
			items = append(items, k+"="+fmt.Sprint(v))
		}
		sort.Strings(items)
		return strings.Join(items, ",")
	case []any: // a YAML list for a list setting: docker_cap_add: [CHOWN, SETUID]
		items := make([]string, len(t))
		for i, item := range t {
			items[i] = fmt.Sprint(item)
		}
		return strings.Join(items, ",")
	default:
		return fmt.Sprint(t)
	}
}

// resolveEnv expands $VAR and ${VAR} values from the gateway's environment,
// as DeerFlow does; a missing variable becomes empty.
func resolveEnv(in map[string]string, lookupEnv func(string) (string, bool)) map[string]string {
	out := make(map[string]string, len(in))
	for k, v := range in {
		out[k] = expandEnv(v, lookupEnv)
	}
	return out
}

// expandEnv expands $VAR and ${VAR} in v; a missing variable is empty.
func expandEnv(v string, lookupEnv func(string) (string, bool)) string {
	return os.Expand(v, func(name string) string {
		val, _ := lookupEnv(name)
		return val
	})
}
