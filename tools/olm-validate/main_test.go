package main

// The committed bundle passes; the verdict logic; and, for every rule the project's own validator
// (operator/src/bundle/validate.rs) dropped in favour of the official suite, a broken copy of the
// committed bundle that the official suite refuses. If an upgrade of
// github.com/operator-framework/api stops catching one of them, its case here fails and the rule
// goes back into validate.rs.

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

const (
	committed = "../../bundles/initializer-operator"
	csvFile   = "manifests/initializer-operator.clusterserviceversion.yaml"
	crdFile   = "manifests/initializer.dev_initializers.yaml"
	pdbFile   = "manifests/initializer-operator.poddisruptionbudget.yaml"
)

// copyBundle copies the committed bundle into a temporary directory.
func copyBundle(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	err := filepath.WalkDir(committed, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(committed, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dir, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(target, data, 0o644)
	})
	if err != nil {
		t.Fatalf("failed to copy the bundle: %v", err)
	}
	return dir
}

// edit rewrites one YAML file of the copy through change.
func edit(t *testing.T, dir, name string, change func(map[string]interface{})) {
	t.Helper()
	path := filepath.Join(dir, name)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var value map[string]interface{}
	if err := yaml.Unmarshal(data, &value); err != nil {
		t.Fatal(err)
	}
	change(value)
	out, err := yaml.Marshal(value)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
}

// at walks a path of map keys and slice indexes.
func at(value interface{}, path ...interface{}) interface{} {
	for _, key := range path {
		switch k := key.(type) {
		case string:
			value = value.(map[string]interface{})[k]
		case int:
			value = value.([]interface{})[k]
		}
	}
	return value
}

func mapAt(value interface{}, path ...interface{}) map[string]interface{} {
	return at(value, path...).(map[string]interface{})
}

func validateDir(dir string) (int, string) {
	var out bytes.Buffer
	code := run([]string{dir}, &out, &out)
	return code, out.String()
}

func TestCommittedBundlePassesTheOfficialSuite(t *testing.T) {
	code, out := validateDir(committed)
	if code != 0 {
		t.Fatalf("olm-validate exited %d:\n%s", code, out)
	}
}

func TestAnErrorFailsAndAnAllowedWarningDoesNot(t *testing.T) {
	allow := []allowedWarning{{contains: "known", why: "because"}}
	v := judge([]finding{{validator: "x", warning: true, text: "a known thing"}}, allow)
	if v.failed {
		t.Fatalf("an allowed warning failed the run: %v", v.lines)
	}
	if !strings.Contains(v.lines[0], "(allowed: because)") {
		t.Fatalf("the reason is not printed: %v", v.lines)
	}
	v = judge([]finding{{validator: "x", text: "a known thing"}}, allow)
	if !v.failed {
		t.Fatal("an error matching the allow-list passed: the allow-list is for warnings only")
	}
}

func TestAWarningOutsideTheAllowListFails(t *testing.T) {
	v := judge([]finding{{validator: "x", warning: true, text: "something new"}},
		[]allowedWarning{{contains: "known", why: "because"}})
	if !v.failed {
		t.Fatalf("an unknown warning passed: %v", v.lines)
	}
}

func TestErrorsArePrintedBeforeWarnings(t *testing.T) {
	v := judge([]finding{
		{validator: "a", warning: true, text: "w"},
		{validator: "b", text: "e"},
	}, nil)
	if !strings.HasPrefix(v.lines[0], "ERROR") || !strings.HasPrefix(v.lines[1], "WARNING") {
		t.Fatalf("unexpected order: %v", v.lines)
	}
}

func TestBadUsageAndAMissingDirectoryExitTwo(t *testing.T) {
	var out bytes.Buffer
	if code := run(nil, &out, &out); code != 2 {
		t.Fatalf("no argument: exit %d", code)
	}
	out.Reset()
	if code := run([]string{filepath.Join(t.TempDir(), "absent")}, &out, &out); code != 2 {
		t.Fatalf("missing directory: exit %d", code)
	}
	if !strings.Contains(out.String(), "failed to read bundle") {
		t.Fatalf("unclear message: %s", out.String())
	}
}

// The rules validate.rs leaves to the official suite (the first three and the typed-object cases
// it still notices only as far as its own rules need to read those manifests).
func TestTheOfficialSuiteCatchesEachRuleTheProjectValidatorDropped(t *testing.T) {
	cases := []struct {
		name  string
		spoil func(t *testing.T, dir string)
		want  string
	}{
		{"a manifest that does not parse", func(t *testing.T, dir string) {
			writeFile(t, dir, pdbFile, "kind: [unclosed\n")
		}, "unable to decode object"},
		{"a second CSV", func(t *testing.T, dir string) {
			data, _ := os.ReadFile(filepath.Join(dir, csvFile))
			writeFile(t, dir, "manifests/copy.clusterserviceversion.yaml", string(data))
		}, "contains multiple CSVs"},
		{"no CSV", func(t *testing.T, dir string) {
			if err := os.Remove(filepath.Join(dir, csvFile)); err != nil {
				t.Fatal(err)
			}
		}, "unable to find a csv"},
		{"no displayName", func(t *testing.T, dir string) {
			edit(t, dir, csvFile, func(v map[string]interface{}) { delete(mapAt(v, "spec"), "displayName") })
		}, "Spec.DisplayName"},
		{"no provider", func(t *testing.T, dir string) {
			edit(t, dir, csvFile, func(v map[string]interface{}) { delete(mapAt(v, "spec"), "provider") })
		}, "csv.Spec.Provider.Name not specified"},
		{"no icon", func(t *testing.T, dir string) {
			edit(t, dir, csvFile, func(v map[string]interface{}) { delete(mapAt(v, "spec"), "icon") })
		}, "csv.Spec.Icon not specified"},
		{"an icon media type consoles cannot show", func(t *testing.T, dir string) {
			edit(t, dir, csvFile, func(v map[string]interface{}) { mapAt(v, "spec", "icon", 0)["mediatype"] = "image/bmp" })
		}, "does not have a valid mediatype"},
		{"a minKubeVersion that is not semver", func(t *testing.T, dir string) {
			edit(t, dir, csvFile, func(v map[string]interface{}) { mapAt(v, "spec")["minKubeVersion"] = "1.31" })
		}, "csv.Spec.MinKubeVersion has an invalid value"},
		{"an unknown capability level", func(t *testing.T, dir string) {
			edit(t, dir, csvFile, func(v map[string]interface{}) {
				mapAt(v, "metadata", "annotations")["capabilities"] = "Fully Automatic"
			})
		}, "is not a valid capabilities level"},
		{"an unknown category", func(t *testing.T, dir string) {
			edit(t, dir, csvFile, func(v map[string]interface{}) {
				mapAt(v, "metadata", "annotations")["categories"] = "Developer Tools, Magic"
			})
		}, "is not in the set of standard categories"},
		{"a deployment spec that is not a DeploymentSpec", func(t *testing.T, dir string) {
			edit(t, dir, csvFile, func(v map[string]interface{}) {
				mapAt(v, "spec", "install", "spec", "deployments", 0, "spec")["replicas"] = "two"
			})
		}, "DeploymentSpec"},
		{"permission rules that are not PolicyRules", func(t *testing.T, dir string) {
			edit(t, dir, csvFile, func(v map[string]interface{}) {
				mapAt(v, "spec", "install", "spec", "clusterPermissions", 0, "rules", 0)["verbs"] = "get"
			})
		}, "PolicyRule"},
		{"a CRD that is not a CRD", func(t *testing.T, dir string) {
			edit(t, dir, crdFile, func(v map[string]interface{}) { mapAt(v, "spec")["versions"] = "v1alpha1" })
		}, "unable to parse CRD"},
		{"a ServiceAccount manifest duplicating the CSV's", func(t *testing.T, dir string) {
			writeFile(t, dir, "manifests/service-account.yaml",
				"apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: initializer-operator\n")
		}, "invalid service account found in bundle"},
		{"an owned CRD version the CRD does not serve", func(t *testing.T, dir string) {
			edit(t, dir, csvFile, func(v map[string]interface{}) {
				mapAt(v, "spec", "customresourcedefinitions", "owned", 0)["version"] = "v9"
			})
		}, `owned CRD "initializer.dev/v9, Kind=Initializer" not found`},
		{"an owned CRD kind the CRD does not have", func(t *testing.T, dir string) {
			edit(t, dir, csvFile, func(v map[string]interface{}) {
				mapAt(v, "spec", "customresourcedefinitions", "owned", 0)["kind"] = "Other"
			})
		}, `owned CRD "initializer.dev/v1alpha1, Kind=Other" not found`},
		{"a CRD the CSV does not own", func(t *testing.T, dir string) {
			edit(t, dir, csvFile, func(v map[string]interface{}) {
				mapAt(v, "spec", "customresourcedefinitions")["owned"] = []interface{}{}
			})
		}, "is present in bundle"},
		{"alm-examples that are not JSON", func(t *testing.T, dir string) {
			edit(t, dir, csvFile, func(v map[string]interface{}) {
				mapAt(v, "metadata", "annotations")["alm-examples"] = "[{not json"
			})
		}, "invalid example"},
		{"no alm-examples", func(t *testing.T, dir string) {
			edit(t, dir, csvFile, func(v map[string]interface{}) { delete(mapAt(v, "metadata", "annotations"), "alm-examples") })
		}, "example annotations not found"},
		{"an empty alm-examples", func(t *testing.T, dir string) {
			edit(t, dir, csvFile, func(v map[string]interface{}) { mapAt(v, "metadata", "annotations")["alm-examples"] = "[]" })
		}, "provided API should have an example annotation"},
		{"an example of a kind not owned", func(t *testing.T, dir string) {
			edit(t, dir, csvFile, func(v map[string]interface{}) {
				mapAt(v, "metadata", "annotations")["alm-examples"] =
					`[{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}]`
			})
		}, "example must have a provided API"},
		{"a disruption budget of maxUnavailable 0", func(t *testing.T, dir string) {
			edit(t, dir, pdbFile, func(v map[string]interface{}) { mapAt(v, "spec")["maxUnavailable"] = 0 })
		}, "maxUnavailable field cannot be set to 0"},
		{"a bundle over one mebibyte compressed", func(t *testing.T, dir string) {
			blob := make([]byte, 3<<19)
			if _, err := rand.Read(blob); err != nil {
				t.Fatal(err)
			}
			writeFile(t, dir, "manifests/big.configmap.yaml", fmt.Sprintf(
				"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: big\ndata:\n  blob: %s\n", hex.EncodeToString(blob)))
		}, "maximum bundle compressed size with gzip size exceeded"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := copyBundle(t)
			c.spoil(t, dir)
			code, out := validateDir(dir)
			if code == 0 || !strings.Contains(out, c.want) {
				t.Fatalf("exit %d, want non-zero and %q in:\n%s", code, c.want, out)
			}
		})
	}
}

func writeFile(t *testing.T, dir, name, text string) {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}
