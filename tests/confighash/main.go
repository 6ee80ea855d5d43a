// Command confighash computes InfraKit's group config hash (the `infrakit.config.hash` tag) with
// the real Go encoder, to verify the vectors of src/confighash.rs. Not run by CI; see README.md.
//
// The types and functions below are copied from docker/infrakit at 41da4a6 (Nov 2018), trimmed
// to what the hash uses:
//   - pkg/types/any.go: Any, its MarshalJSON and UnmarshalJSON, Decode;
//   - pkg/plugin/name.go: Name, its MarshalJSON and UnmarshalJSON;
//   - pkg/spi/group/spi.go: Spec (ID, Properties);
//   - pkg/controller/group/types/types.go: InstancePlugin, FlavorPlugin, Spec (Allocation and
//     Updating left out: they are not hashed), ParseProperties, stableFormat, InstanceHash.
//
// Usage:
//
//	go run main.go < specs       one group spec (JSON) a line in, its hash a line out
//	go run main.go -check FILE   recompute every vector of FILE (src/confighash.rs) and compare
package main

import (
	"bufio"
	"crypto/sha1"
	"encoding/base32"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"regexp"
	"runtime"
	"strings"
)

// ---- pkg/types/any.go

// Any is the raw configuration for the plugin
type Any json.RawMessage

// Decode decodes the any into the input typed struct
func (c *Any) Decode(typed interface{}) error {
	if c == nil || len([]byte(*c)) == 0 {
		return nil // no effect on typed
	}
	return json.Unmarshal([]byte(*c), typed)
}

// MarshalJSON implements the json Marshaler interface
func (c *Any) MarshalJSON() ([]byte, error) {
	if c == nil {
		return nil, nil
	}
	return []byte(*c), nil
}

// UnmarshalJSON implements the json Unmarshaler interface
func (c *Any) UnmarshalJSON(data []byte) error {
	*c = Any(json.RawMessage(data))
	return nil
}

// ---- pkg/plugin/name.go

// Name is a reference to the plugin.
type Name string

// String returns the string representation
func (n Name) String() string {
	return string(n)
}

// MarshalJSON implements the JSON marshaler interface
func (n Name) MarshalJSON() ([]byte, error) {
	return []byte(fmt.Sprintf(`"%s"`, n.String())), nil
}

// UnmarshalJSON implements the JSON unmarshaler interface
func (n *Name) UnmarshalJSON(data []byte) error {
	str := string(data)
	start := strings.Index(str, "\"")
	last := strings.LastIndex(str, "\"")
	if start == 0 && last == len(str)-1 {
		str = str[start+1 : last]
	} else {
		return fmt.Errorf("bad-format-for-name:%v", string(data))
	}
	*n = Name(str)
	return nil
}

// ---- pkg/spi/group/spi.go

// GroupSpec is group.Spec.
type GroupSpec struct {
	ID         string
	Properties *Any
}

// ---- pkg/controller/group/types/types.go

// Spec is the configuration schema for the plugin, provided in group.Spec.Properties
type Spec struct {
	Instance InstancePlugin
	Flavor   FlavorPlugin
}

// InstancePlugin is the structure that describes an instance plugin.
type InstancePlugin struct {
	Plugin     Name
	Properties *Any // this will be the Spec of the plugin
}

// FlavorPlugin describes the flavor configuration
type FlavorPlugin struct {
	Plugin     Name
	Properties *Any // this will be the Spec of the plugin
}

// ParseProperties parses the group plugin properties JSON document in a group configuration.
func ParseProperties(config GroupSpec) (Spec, error) {
	parsed := Spec{}
	if config.Properties != nil {
		if err := config.Properties.Decode(&parsed); err != nil {
			return parsed, fmt.Errorf("Invalid properties: %s", err)
		}
	}
	return parsed, nil
}

func stableFormat(v interface{}) []byte {
	// Marshal the JSON to ensure stable key ordering.  This allows structurally-identical JSON to yield the same
	// hash even if the fields are reordered.

	unstable, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}

	props := map[string]interface{}{}
	err = json.Unmarshal(unstable, &props)
	if err != nil {
		panic(err)
	}

	stable, err := json.MarshalIndent(props, "  ", "  ") // sorts the fields
	if err != nil {
		panic(err)
	}
	return stable
}

// InstanceHash computes a stable hash of the document in InstancePluginProperties.
func (c Spec) InstanceHash() string {
	hasher := sha1.New()
	hasher.Write(stableFormat(c.Instance))
	hasher.Write(stableFormat(c.Flavor))
	encoded := base32.StdEncoding.EncodeToString(hasher.Sum(nil))
	// Only valid characters are [a-z][0-9] for support on specific platforms
	encoded = strings.ToLower(encoded)
	// Remove extra padding
	encoded = strings.TrimRight(encoded, "=")
	return encoded
}

// ---- the driver

// hash parses a group spec the way the group controller does and hashes it.
func hash(groupSpec string) (tag string, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	var g GroupSpec
	if err := json.Unmarshal([]byte(groupSpec), &g); err != nil {
		return "", err
	}
	spec, err := ParseProperties(g)
	if err != nil {
		return "", err
	}
	return spec.InstanceHash(), nil
}

// vector is one line of the vectors! table in src/confighash.rs: name: r#"<spec>"# => "<tag>",
// (r##"<spec>"## where the spec holds "#).
var vector = regexp.MustCompile(`(?m)^\s*([a-z0-9_]+):\s*r#+"(.*)"#+\s*=>\s*"([a-z2-7]*)",?\s*$`)

func check(file string) int {
	text, err := os.ReadFile(file)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	bad, n := 0, 0
	for _, m := range vector.FindAllStringSubmatch(string(text), -1) {
		n++
		got, err := hash(m[2])
		switch {
		case err != nil:
			fmt.Printf("ERROR    %s: %v\n", m[1], err)
			bad++
		case got != m[3]:
			fmt.Printf("MISMATCH %s: go %s, file %q\n", m[1], got, m[3])
			bad++
		default:
			fmt.Printf("ok       %s: %s\n", m[1], got)
		}
	}
	fmt.Printf("%d vectors, %d wrong (%s)\n", n, bad, runtime.Version())
	if bad > 0 || n == 0 {
		return 1
	}
	return 0
}

func main() {
	file := flag.String("check", "", "recompute and compare the vectors of this Rust file")
	flag.Parse()
	if *file != "" {
		os.Exit(check(*file))
	}
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<24)
	status := 0
	for in.Scan() {
		if strings.TrimSpace(in.Text()) == "" {
			continue
		}
		tag, err := hash(in.Text())
		if err != nil {
			fmt.Printf("error: %v\n", err)
			status = 1
			continue
		}
		fmt.Println(tag)
	}
	os.Exit(status)
}
