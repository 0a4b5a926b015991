// Command chart-render renders a Helm chart the way `helm template` does, for machines where no helm
// binary can be installed (CI here reaches only Debian's packages, and Debian does not package helm).
// It is built from Debian's Go toolchain and Go libraries, the same ones helm links: text/template,
// sprig v3 for the function library, sigs.k8s.io/yaml for values and toYaml, gojsonschema for
// values.schema.json (the validator helm used up to 3.17), Masterminds/semver for kubeVersion.
//
//	chart-render [flags] RELEASE_NAME CHART_DIR
//	  -n, --namespace NS        .Release.Namespace (default "default")
//	  -f, --values FILE         a values file (repeatable, later files win)
//	  --set K=V[,K=V]           as helm: typed scalars, a.b paths, a[0] indices, {x,y} lists, \, and \. escapes
//	  --set-string K=V          as --set, every value a string
//	  --set-file K=PATH         as helm: the value is the file's content
//	  --kube-version V          .Capabilities.KubeVersion (default v1.30.0); checked against Chart.yaml kubeVersion
//	  --api-versions G/V        extra .Capabilities.APIVersions (repeatable)
//	  --show-notes              print the rendered NOTES.txt after the manifests
//
// Output: every rendered document as `---\n# Source: CHART/templates/FILE\n...`, in template file order
// (helm sorts by kind; nothing here depends on the order). Hook documents are printed like the others,
// as `helm template` does. .Files offers Get and GetBytes (a chart file's content by its path inside the
// chart, "" when there is none; templates/ is not reachable, as in helm). Not supported (the gateway
// chart uses none of them): subcharts, .Files.Glob/Lines/AsConfig/AsSecrets, `lookup` against a cluster
// (it returns an empty map, as under `helm template`), toToml.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/Masterminds/semver/v3"
	"github.com/xeipuuv/gojsonschema"
	"sigs.k8s.io/yaml"
)

type options struct {
	releaseName string
	chartDir    string
	namespace   string
	valueFiles  []string
	sets        []string
	setStrings  []string
	setFiles    []string
	kubeVersion string
	extraAPIs   []string
	showNotes   bool
}

func main() {
	opts, err := parseArguments(os.Args[1:])
	if err != nil {
		fmt.Fprintf(os.Stderr, "Error: %v\n", err)
		os.Exit(2)
	}
	output, err := render(opts)
	if err != nil {
		fmt.Fprintf(os.Stderr, "Error: %v\n", err)
		os.Exit(1)
	}
	os.Stdout.WriteString(output)
}

func parseArguments(arguments []string) (options, error) {
	opts := options{namespace: "default", kubeVersion: "v1.30.0"}
	var positional []string
	for index := 0; index < len(arguments); index++ {
		argument := arguments[index]
		name, inlineValue, hasInline := strings.Cut(argument, "=")
		if !strings.HasPrefix(argument, "-") {
			positional = append(positional, argument)
			continue
		}
		if name == "--show-notes" {
			opts.showNotes = true
			continue
		}
		value := inlineValue
		if !hasInline {
			if index+1 >= len(arguments) {
				return opts, fmt.Errorf("flag %s needs a value", name)
			}
			index++
			value = arguments[index]
		}
		switch name {
		case "-n", "--namespace":
			opts.namespace = value
		case "-f", "--values":
			opts.valueFiles = append(opts.valueFiles, value)
		case "--set":
			opts.sets = append(opts.sets, value)
		case "--set-string":
			opts.setStrings = append(opts.setStrings, value)
		case "--set-file":
			opts.setFiles = append(opts.setFiles, value)
		case "--kube-version":
			opts.kubeVersion = value
		case "-a", "--api-versions":
			opts.extraAPIs = append(opts.extraAPIs, value)
		default:
			return opts, fmt.Errorf("unknown flag %s", name)
		}
	}
	if len(positional) != 2 {
		return opts, errors.New("usage: chart-render [flags] RELEASE_NAME CHART_DIR")
	}
	opts.releaseName, opts.chartDir = positional[0], positional[1]
	return opts, nil
}

// chartMetadata is what templates see as .Chart (helm's chart.Metadata, the fields this chart has).
type chartMetadata struct {
	APIVersion   string            `json:"apiVersion"`
	Name         string            `json:"name"`
	Version      string            `json:"version"`
	AppVersion   string            `json:"appVersion"`
	Description  string            `json:"description"`
	Type         string            `json:"type"`
	KubeVersion  string            `json:"kubeVersion"`
	Keywords     []string          `json:"keywords"`
	Home         string            `json:"home"`
	Sources      []string          `json:"sources"`
	Icon         string            `json:"icon"`
	Deprecated   bool              `json:"deprecated"`
	Annotations  map[string]string `json:"annotations"`
	Dependencies []interface{}     `json:"dependencies"`
}

// Helm's own rule for release names: a DNS-1123 subdomain of at most 53 characters.
var releaseNamePattern = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)

func render(opts options) (string, error) {
	if len(opts.releaseName) > 53 || !releaseNamePattern.MatchString(opts.releaseName) {
		return "", fmt.Errorf("invalid release name %q: a DNS-1123 subdomain of at most 53 characters", opts.releaseName)
	}
	metadata, err := loadChartMetadata(opts.chartDir)
	if err != nil {
		return "", err
	}
	capabilities, err := newCapabilities(opts.kubeVersion, opts.extraAPIs)
	if err != nil {
		return "", err
	}
	if metadata.KubeVersion != "" {
		constraint, err := semver.NewConstraint(metadata.KubeVersion)
		if err != nil {
			return "", fmt.Errorf("Chart.yaml kubeVersion %q: %v", metadata.KubeVersion, err)
		}
		if !constraint.Check(capabilities.KubeVersion.semver) {
			return "", fmt.Errorf("chart requires kubeVersion: %s which is incompatible with Kubernetes %s", metadata.KubeVersion, capabilities.KubeVersion.Version)
		}
	}

	chartValues, err := readValuesFile(filepath.Join(opts.chartDir, "values.yaml"), true)
	if err != nil {
		return "", err
	}
	userValues, err := mergeUserValues(opts)
	if err != nil {
		return "", err
	}
	values := coalesce(deepCopyMap(chartValues), userValues)

	if schema, err := os.ReadFile(filepath.Join(opts.chartDir, "values.schema.json")); err == nil {
		if err := validateValues(metadata.Name, schema, values); err != nil {
			return "", err
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}

	templates, err := loadTemplates(opts.chartDir, metadata.Name)
	if err != nil {
		return "", err
	}
	top := map[string]interface{}{
		"Chart":        metadata,
		"Capabilities": capabilities,
		"Release": map[string]interface{}{
			"Name":      opts.releaseName,
			"Namespace": opts.namespace,
			"IsInstall": true,
			"IsUpgrade": false,
			"Revision":  1,
			"Service":   "Helm",
		},
		"Values":    values,
		"Subcharts": map[string]interface{}{},
		"Files":     chartFiles{dir: opts.chartDir},
	}
	rendered, err := renderTemplates(templates, top, metadata.Name+"/templates")
	if err != nil {
		return "", err
	}
	return formatManifests(rendered, metadata.Name, opts.showNotes)
}

func loadChartMetadata(chartDir string) (*chartMetadata, error) {
	raw, err := os.ReadFile(filepath.Join(chartDir, "Chart.yaml"))
	if err != nil {
		return nil, err
	}
	var metadata chartMetadata
	if err := yaml.Unmarshal(raw, &metadata); err != nil {
		return nil, fmt.Errorf("Chart.yaml: %v", err)
	}
	if metadata.APIVersion != "v2" || metadata.Name == "" || metadata.Version == "" {
		return nil, errors.New("Chart.yaml: apiVersion v2, name and version are required")
	}
	if _, err := semver.StrictNewVersion(metadata.Version); err != nil {
		return nil, fmt.Errorf("Chart.yaml: version %q is not SemVer 2", metadata.Version)
	}
	if len(metadata.Dependencies) > 0 {
		return nil, errors.New("Chart.yaml: dependencies (subcharts) are not supported by this renderer")
	}
	return &metadata, nil
}

// readValuesFile parses YAML as helm does (YAML to JSON, then JSON to Go), so numbers arrive as
// float64 exactly as in helm: `{{ .Values.x }}` prints 1767225600 as 1.7672256e+09 there too.
func readValuesFile(file string, allowMissing bool) (map[string]interface{}, error) {
	raw, err := os.ReadFile(file)
	if err != nil {
		if allowMissing && errors.Is(err, fs.ErrNotExist) {
			return map[string]interface{}{}, nil
		}
		return nil, err
	}
	values := map[string]interface{}{}
	if err := yaml.Unmarshal(raw, &values); err != nil {
		return nil, fmt.Errorf("%s: %v", file, err)
	}
	return values, nil
}

// mergeUserValues applies the sources in helm's order: values files, --set, --set-string, --set-file.
func mergeUserValues(opts options) (map[string]interface{}, error) {
	merged := map[string]interface{}{}
	for _, file := range opts.valueFiles {
		values, err := readValuesFile(file, false)
		if err != nil {
			return nil, err
		}
		merged = mergeMaps(merged, values)
	}
	for _, line := range opts.sets {
		if err := parseSetLine(line, merged, scalarTyped); err != nil {
			return nil, fmt.Errorf("failed parsing --set data: %v", err)
		}
	}
	for _, line := range opts.setStrings {
		if err := parseSetLine(line, merged, scalarString); err != nil {
			return nil, fmt.Errorf("failed parsing --set-string data: %v", err)
		}
	}
	for _, line := range opts.setFiles {
		if err := parseSetLine(line, merged, scalarFileContent); err != nil {
			return nil, fmt.Errorf("failed parsing --set-file data: %v", err)
		}
	}
	return merged, nil
}

// mergeMaps merges b into a (b wins), recursing where both hold maps: helm's rule between values files.
func mergeMaps(a, b map[string]interface{}) map[string]interface{} {
	out := make(map[string]interface{}, len(a))
	for key, value := range a {
		out[key] = value
	}
	for key, value := range b {
		if inner, ok := value.(map[string]interface{}); ok {
			if existing, ok := out[key].(map[string]interface{}); ok {
				out[key] = mergeMaps(existing, inner)
				continue
			}
		}
		out[key] = value
	}
	return out
}

// coalesce lays user values over the chart's defaults: maps merge key by key, anything else replaces,
// and a user null deletes the default (helm's way to drop a key from values.yaml).
func coalesce(defaults, user map[string]interface{}) map[string]interface{} {
	for key, value := range user {
		if value == nil {
			delete(defaults, key)
			continue
		}
		userMap, userIsMap := value.(map[string]interface{})
		defaultMap, defaultIsMap := defaults[key].(map[string]interface{})
		if userIsMap && defaultIsMap {
			defaults[key] = coalesce(defaultMap, userMap)
			continue
		}
		if userIsMap {
			defaults[key] = coalesce(map[string]interface{}{}, userMap)
			continue
		}
		defaults[key] = value
	}
	return defaults
}

func deepCopyMap(source map[string]interface{}) map[string]interface{} {
	out := make(map[string]interface{}, len(source))
	for key, value := range source {
		out[key] = deepCopy(value)
	}
	return out
}

func deepCopy(value interface{}) interface{} {
	switch typed := value.(type) {
	case map[string]interface{}:
		return deepCopyMap(typed)
	case []interface{}:
		out := make([]interface{}, len(typed))
		for index, item := range typed {
			out[index] = deepCopy(item)
		}
		return out
	default:
		return value
	}
}

// validateValues checks the coalesced values against values.schema.json the way helm 3 does (through
// JSON, with gojsonschema) and words the failure as helm does.
func validateValues(chartName string, schema []byte, values map[string]interface{}) error {
	document, err := json.Marshal(values)
	if err != nil {
		return err
	}
	result, err := gojsonschema.Validate(gojsonschema.NewBytesLoader(schema), gojsonschema.NewBytesLoader(document))
	if err != nil {
		return fmt.Errorf("values.schema.json: %v", err)
	}
	if result.Valid() {
		return nil
	}
	var message strings.Builder
	fmt.Fprintf(&message, "values don't meet the specifications of the schema(s) in the following chart(s):\n%s:\n", chartName)
	for _, problem := range result.Errors() {
		fmt.Fprintf(&message, "- %s\n", problem)
	}
	return errors.New(strings.TrimSuffix(message.String(), "\n"))
}

// loadTemplates reads every file under templates/, named as helm names them (CHART/templates/PATH).
func loadTemplates(chartDir, chartName string) (map[string]string, error) {
	root := filepath.Join(chartDir, "templates")
	templates := map[string]string{}
	err := filepath.WalkDir(root, func(file string, entry fs.DirEntry, err error) error {
		if err != nil || entry.IsDir() {
			return err
		}
		relative, err := filepath.Rel(root, file)
		if err != nil {
			return err
		}
		text, err := os.ReadFile(file)
		if err != nil {
			return err
		}
		templates[path.Join(chartName, "templates", filepath.ToSlash(relative))] = string(text)
		return nil
	})
	return templates, err
}

// helm's document separator: `---` at the start of a line, with what surrounds it.
var documentSeparator = regexp.MustCompile(`(?:^|\s*\n)---\s*`)

func formatManifests(rendered map[string]string, chartName string, showNotes bool) (string, error) {
	names := make([]string, 0, len(rendered))
	for name := range rendered {
		names = append(names, name)
	}
	sort.Strings(names)
	notesName := path.Join(chartName, "templates", "NOTES.txt")
	var out bytes.Buffer
	for _, name := range names {
		if name == notesName {
			continue
		}
		for _, document := range documentSeparator.Split(rendered[name], -1) {
			if strings.TrimSpace(document) == "" {
				continue
			}
			// helm refuses a release whose documents are not YAML objects with apiVersion and kind.
			var head struct {
				APIVersion string `json:"apiVersion"`
				Kind       string `json:"kind"`
			}
			if err := yaml.Unmarshal([]byte(document), &head); err != nil {
				return "", fmt.Errorf("YAML parse error on %s: %v", name, err)
			}
			if head.APIVersion == "" || head.Kind == "" {
				return "", fmt.Errorf("%s: a document without apiVersion or kind", name)
			}
			fmt.Fprintf(&out, "---\n# Source: %s\n%s\n", name, strings.TrimSpace(document))
		}
	}
	if showNotes {
		if notes, ok := rendered[notesName]; ok {
			fmt.Fprintf(&out, "\nNOTES:\n%s\n", notes)
		}
	}
	return out.String(), nil
}

// chartFiles is .Files: the chart's own files by their slash-separated path inside the chart. As in
// helm, templates/ and paths leaving the chart are not files of it, and a missing file reads as "".
type chartFiles struct{ dir string }

func (files chartFiles) GetBytes(name string) []byte {
	clean := path.Clean("/" + filepath.ToSlash(name))[1:]
	if clean == "" || clean == "templates" || strings.HasPrefix(clean, "templates/") {
		return nil
	}
	raw, err := os.ReadFile(filepath.Join(files.dir, filepath.FromSlash(clean)))
	if err != nil {
		return nil
	}
	return raw
}

func (files chartFiles) Get(name string) string {
	return string(files.GetBytes(name))
}
