package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"regexp"
	"sort"
	"strings"
	"text/template"

	"github.com/Masterminds/semver/v3"
	"github.com/Masterminds/sprig/v3"
	"sigs.k8s.io/yaml"
)

// kubeVersion is .Capabilities.KubeVersion: Version, Major, Minor, GitVersion, as in helm.
type kubeVersion struct {
	Version string
	Major   string
	Minor   string
	semver  *semver.Version
}

func (version kubeVersion) String() string     { return version.Version }
func (version kubeVersion) GitVersion() string { return version.Version }

// versionSet is .Capabilities.APIVersions; templates ask it `.Has "policy/v1"`.
type versionSet []string

func (set versionSet) Has(apiVersion string) bool {
	for _, known := range set {
		if known == apiVersion {
			return true
		}
	}
	return false
}

type capabilities struct {
	KubeVersion kubeVersion
	APIVersions versionSet
	HelmVersion map[string]string
}

// The group versions a current cluster serves (helm fills this from its client library's scheme).
var builtinAPIVersions = []string{
	"v1", "apps/v1", "batch/v1", "autoscaling/v1", "autoscaling/v2", "policy/v1",
	"networking.k8s.io/v1", "rbac.authorization.k8s.io/v1", "storage.k8s.io/v1",
	"coordination.k8s.io/v1", "discovery.k8s.io/v1", "events.k8s.io/v1", "scheduling.k8s.io/v1",
	"node.k8s.io/v1", "certificates.k8s.io/v1", "admissionregistration.k8s.io/v1",
	"apiextensions.k8s.io/v1", "apiregistration.k8s.io/v1", "authentication.k8s.io/v1",
	"authorization.k8s.io/v1", "flowcontrol.apiserver.k8s.io/v1",
}

func newCapabilities(version string, extraAPIs []string) (*capabilities, error) {
	parsed, err := semver.NewVersion(version)
	if err != nil {
		return nil, fmt.Errorf("--kube-version %q: %v", version, err)
	}
	apis := append(append(versionSet{}, builtinAPIVersions...), extraAPIs...)
	return &capabilities{
		KubeVersion: kubeVersion{
			Version: "v" + parsed.String(),
			Major:   fmt.Sprint(parsed.Major()),
			Minor:   fmt.Sprint(parsed.Minor()),
			semver:  parsed,
		},
		APIVersions: apis,
		HelmVersion: map[string]string{"Version": "v3-compatible chart-render"},
	}, nil
}

// Errors from required/fail carry these marks so the message can be cut out of text/template's
// wrapping, and reported as helm does: "execution error at (FILE:LINE:COL): MESSAGE".
const (
	failStart = "CHART_RENDER_FAIL_START"
	failEnd   = "CHART_RENDER_FAIL_END"
)

var failPattern = regexp.MustCompile(failStart + `((?s).*)` + failEnd)

// includeDepthMax stops a template that includes itself without end.
const includeDepthMax = 1000

func functionMap(root *template.Template, includeDepth map[string]int) template.FuncMap {
	functions := sprig.TxtFuncMap()
	// helm removes these: a chart must render the same wherever it is rendered.
	delete(functions, "env")
	delete(functions, "expandenv")

	functions["toYaml"] = func(value interface{}) string {
		data, err := yaml.Marshal(value)
		if err != nil {
			return ""
		}
		return strings.TrimSuffix(string(data), "\n")
	}
	functions["mustToYaml"] = func(value interface{}) (string, error) {
		data, err := yaml.Marshal(value)
		return strings.TrimSuffix(string(data), "\n"), err
	}
	functions["fromYaml"] = func(text string) map[string]interface{} {
		out := map[string]interface{}{}
		if err := yaml.Unmarshal([]byte(text), &out); err != nil {
			out["Error"] = err.Error()
		}
		return out
	}
	functions["fromYamlArray"] = func(text string) []interface{} {
		out := []interface{}{}
		if err := yaml.Unmarshal([]byte(text), &out); err != nil {
			out = []interface{}{err.Error()}
		}
		return out
	}
	functions["toJson"] = func(value interface{}) string {
		data, err := json.Marshal(value)
		if err != nil {
			return ""
		}
		return string(data)
	}
	functions["mustToJson"] = func(value interface{}) (string, error) {
		data, err := json.Marshal(value)
		return string(data), err
	}
	functions["fromJson"] = func(text string) map[string]interface{} {
		out := map[string]interface{}{}
		if err := json.Unmarshal([]byte(text), &out); err != nil {
			out["Error"] = err.Error()
		}
		return out
	}
	functions["fromJsonArray"] = func(text string) []interface{} {
		out := []interface{}{}
		if err := json.Unmarshal([]byte(text), &out); err != nil {
			out = []interface{}{err.Error()}
		}
		return out
	}
	functions["required"] = func(message string, value interface{}) (interface{}, error) {
		if value == nil {
			return value, errors.New(failStart + message + failEnd)
		}
		if text, ok := value.(string); ok && text == "" {
			return value, errors.New(failStart + message + failEnd)
		}
		return value, nil
	}
	functions["fail"] = func(message string) (string, error) {
		return "", errors.New(failStart + message + failEnd)
	}
	// `helm template` has no cluster to look into: lookup answers with nothing.
	functions["lookup"] = func(string, string, string, string) (map[string]interface{}, error) {
		return map[string]interface{}{}, nil
	}
	functions["getHostByName"] = func(string) string { return "" }
	functions["include"] = includeFunction(root, includeDepth)
	functions["tpl"] = tplFunction(root, includeDepth)
	return functions
}

func includeFunction(templates *template.Template, includeDepth map[string]int) func(string, interface{}) (string, error) {
	return func(name string, data interface{}) (string, error) {
		if includeDepth[name] > includeDepthMax {
			return "", fmt.Errorf("template %q includes itself more than %d levels deep", name, includeDepthMax)
		}
		includeDepth[name]++
		defer func() { includeDepth[name]-- }()
		var out strings.Builder
		err := templates.ExecuteTemplate(&out, name, data)
		return out.String(), err
	}
}

// tplFunction renders a string as a template against the given data, with every named template of
// the chart in reach (helm clones the chart's template set for it).
func tplFunction(parent *template.Template, includeDepth map[string]int) func(string, interface{}) (string, error) {
	return func(text string, data interface{}) (string, error) {
		clone, err := parent.Clone()
		if err != nil {
			return "", fmt.Errorf("cannot clone template: %v", err)
		}
		clone.Option("missingkey=zero")
		clone.Funcs(template.FuncMap{
			"include": includeFunction(clone, includeDepth),
			"tpl":     tplFunction(clone, includeDepth),
		})
		parsed, err := clone.New(parent.Name()).Parse(text)
		if err != nil {
			return "", fmt.Errorf("cannot parse template %q: %v", text, err)
		}
		var out strings.Builder
		if err := parsed.Execute(&out, data); err != nil {
			return "", fmt.Errorf("error during tpl function execution for %q: %v", text, err)
		}
		return strings.ReplaceAll(out.String(), "<no value>", ""), nil
	}
}

// renderTemplates parses every template into one set (so `define`s are shared) and executes each file
// whose name does not start with `_`, with .Template set for it.
func renderTemplates(sources map[string]string, top map[string]interface{}, basePath string) (map[string]string, error) {
	names := make([]string, 0, len(sources))
	for name := range sources {
		names = append(names, name)
	}
	// helm's parse order: deeper paths first, then by name; a later `define` of the same name wins.
	sort.Slice(names, func(i, j int) bool {
		depthI, depthJ := strings.Count(names[i], "/"), strings.Count(names[j], "/")
		if depthI != depthJ {
			return depthI > depthJ
		}
		return names[i] > names[j]
	})

	root := template.New("gotpl").Option("missingkey=zero")
	includeDepth := map[string]int{}
	root.Funcs(functionMap(root, includeDepth))
	for _, name := range names {
		if _, err := root.New(name).Parse(sources[name]); err != nil {
			return nil, fmt.Errorf("parse error in %s: %v", name, err)
		}
	}

	rendered := map[string]string{}
	for _, name := range names {
		if strings.HasPrefix(path.Base(name), "_") {
			continue
		}
		data := make(map[string]interface{}, len(top)+1)
		for key, value := range top {
			data[key] = value
		}
		data["Template"] = map[string]interface{}{"Name": name, "BasePath": basePath}
		var out strings.Builder
		if err := root.ExecuteTemplate(&out, name, data); err != nil {
			return nil, describeExecutionError(name, err)
		}
		rendered[name] = strings.ReplaceAll(out.String(), "<no value>", "")
	}
	return rendered, nil
}

func describeExecutionError(name string, err error) error {
	message := err.Error()
	// text/template words it "template: NAME:LINE:COL: executing ... : CAUSE".
	location := name
	if parts := strings.SplitN(message, ": ", 3); len(parts) == 3 && strings.HasPrefix(message, "template: ") {
		location = parts[1]
	}
	if match := failPattern.FindStringSubmatch(message); match != nil {
		return fmt.Errorf("execution error at (%s): %s", location, match[1])
	}
	return fmt.Errorf("execution error at (%s): %v", location, err)
}
