package policy

import (
	"bytes"
	"encoding/hex"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestFilterAgainstJava compares Filter with java.util.regex on the local JDK: the golden table of
// filter_test.go, every predefined class over the first 12,500 code points, and thousands of random
// pattern lists. It needs javac and java on PATH, as on the development and CI machines.
func TestFilterAgainstJava(t *testing.T) {
	java := newJavaMatcher(t)

	t.Run("golden table", func(t *testing.T) {
		cases := javaMatchCases()
		lines := make([][]string, len(cases))
		for i, c := range cases {
			lines[i] = []string{strings.Join(c.include, "|"), c.in}
		}
		for i, res := range java.run(t, lines) {
			want := "OK 0"
			if cases[i].want {
				want = "OK 1"
			}
			require.Equal(t, want, res, "case %q", cases[i].name)
		}
	})

	t.Run("predefined classes per code point", func(t *testing.T) {
		patterns := []string{`\s`, `\S`, `\h`, `\H`, `\v`, `\V`, `\w`, `\W`, `\d`, `\D`, `.`, `(?s).`,
			`[\s]`, `[^\s]`, `[\S]`, `[\H]`, `[^\V]`, `[\v-\x{e}]`, `(?i)\p{Lower}`, `(?i)\p{Upper}`,
			`(?i)\P{Lower}`, `(?i)[a-z]`, `(?i)[^k]`, `(?i)k`, `(?i)[\x{0}-\x{ff}]`, `(?i)[Z-a]`}
		for _, n := range []string{"Lower", "Upper", "ASCII", "Alpha", "Digit", "Alnum", "Punct", "Graph", "Print", "Blank", "Cntrl", "XDigit", "Space"} {
			patterns = append(patterns, `\p{`+n+`}`, `\P{`+n+`}`, `[^\p{`+n+`}]`)
		}
		var names []string
		for r := rune(0); r < 0x3100; r++ {
			if r < 0xd800 || r > 0xdfff {
				names = append(names, string(r))
			}
		}
		names = append(names, "\ufeff", "\U0001f600", "\U0010ffff", "\u212a", "\u017f")
		lines := make([][]string, len(patterns))
		for i, p := range patterns {
			lines[i] = append([]string{p}, names...)
		}
		for i, res := range java.run(t, lines) {
			f := newTestFilter(t, []string{patterns[i]}, nil)
			require.Equal(t, "OK ", res[:3], "pattern %q", patterns[i])
			for j, name := range names {
				if want := res[3+j] == '1'; f.Match(name) != want {
					require.Failf(t, "Java and Filter disagree", "pattern %q, name %U: Java says %v", patterns[i], []rune(name)[0], want)
				}
			}
		}
	})

	t.Run("random lists", func(t *testing.T) {
		const lists = 3000
		rng := rand.New(rand.NewPCG(1, 2))
		pick := func(from []string) string { return from[rng.IntN(len(from))] }
		type list struct {
			items []string
			names []string
		}
		all := make([]list, lists)
		lines := make([][]string, lists)
		for i := range all {
			for n := rng.IntN(3) + 1; n > 0; n-- {
				var b strings.Builder
				for k := rng.IntN(5) + 1; k > 0; k-- {
					b.WriteString(pick(regexAtoms()))
				}
				all[i].items = append(all[i].items, b.String())
			}
			for n := 0; n < 20; n++ {
				var b strings.Builder
				for k := rng.IntN(5); k > 0; k-- {
					b.WriteString(pick(nameRunes()))
				}
				all[i].names = append(all[i].names, b.String())
			}
			lines[i] = append([]string{strings.Join(all[i].items, "|")}, all[i].names...)
		}
		accepted := 0
		for i, res := range java.run(t, lines) {
			l := all[i]
			f, err := NewFilter(l.items, nil)
			if strings.HasPrefix(res, "ERR") {
				require.Error(t, err, "Java rejects %q (%s)", l.items, res)
				continue
			}
			if err != nil {
				var pe *PatternError
				require.ErrorAs(t, err, &pe) // a construct we reject on purpose
				continue
			}
			accepted++
			for j, name := range l.names {
				require.Equal(t, res[3+j] == '1', f.Match(name), "list %q, name %q", l.items, name)
			}
		}
		// Guard against a generator or translator change that makes this test vacuous.
		require.Greater(t, accepted, lists/5, "too few random lists compiled")
		t.Logf("%d of %d random lists compiled and matched as in Java", accepted, lists)
	})
}

// regexAtoms are the building blocks of the random Java patterns: valid and invalid pieces, and
// constructs whose meaning differs between Java and RE2.
func regexAtoms() []string {
	return []string{"a", "A", "b", "k", "K", "-", "_", "0", "é", " ", ".", ".", `\d`, `\D`, `\w`, `\W`, `\s`,
		`\S`, `\h`, `\H`, `\v`, `\V`, `\.`, `\-`, `\Qa.\E`, `\Q-\E`, `\Q1`, `\E`, `\x41`, `\x{e9}`, `\u0061`,
		`\uD83D\uDE00`, `\0141`, `\t`, `\n`, `\r`, `\cA`, `\e`, `\\`, `\p{Alpha}`, `\P{Lower}`, `\p{Upper}`,
		`\p{Punct}`, `\p{Space}`, `\pL`, `\b`, `\z`, `\Z`, `\A`, "^", "$", "|", "(", "(?:", "(?i)", "(?i:",
		"(?-i)", "(?s)", "(?s:", "(?<n>", "(?=", ")", ")", "*", "+", "?", "{2}", "{0,1}", "{1,}", "*?", "*+",
		"{", "}", "]", "[", "[^", "[a-c]", "[^a]", "[]a]", "[a-]", `[\d-z]`, `[\w&&b]`, "[a[b]]", `[\x41-\x43]`,
		"[Z-a]", `[\Qa-c\E]`, `[\v-\x{e}]`, `[\h]`, `[^\s]`, `[\p{Alpha}\d]`, "(?i)[a-c]", "(?i)[^k]",
		`(?i)\p{Lower}`, `(?i)[\p{Upper}]`, "(?i)é", `(?i)\Qk\E`, `\07`, `\0377`, `[\v-]`, `[\0141-c]`,
		"\u212a", "\u017f", "\u0085", "\u2028", "\u00a0", "😀"}
}

// nameRunes are the pieces of the random names matched against the random patterns.
func nameRunes() []string {
	return []string{"a", "A", "b", "B", "k", "K", "-", ".", "_", "0", "1", " ", "\n", "\r", "\t", "\x0b", "\x01",
		"é", "É", "\u212a", "\u017f", "\u0085", "\u2028", "\u00a0", "😀", "c", "C", "z", "Z", "[", "^", "\\",
		"\x1b", "\x07", "\x0e", "\u3000"}
}

// javaMatcher runs testdata/JavaMatch.java, compiled once into a temporary directory.
type javaMatcher struct {
	java, classDir string
}

func newJavaMatcher(t *testing.T) javaMatcher {
	t.Helper()
	javac, err := exec.LookPath("javac")
	if err != nil {
		t.Skip("no javac on PATH; this test compares Filter with java.util.regex and needs a JDK")
	}
	java, err := exec.LookPath("java")
	require.NoError(t, err, "javac found but java missing")
	dir := t.TempDir()
	out, err := exec.Command(javac, "-d", dir, filepath.Join("testdata", "JavaMatch.java")).CombinedOutput()
	require.NoError(t, err, "compile JavaMatch.java: %s", out)
	return javaMatcher{java: java, classDir: dir}
}

// run sends one line per entry (a pattern followed by names) and returns Java's answer per line.
func (m javaMatcher) run(t *testing.T, lines [][]string) []string {
	t.Helper()
	var in bytes.Buffer
	for _, fields := range lines {
		for i, f := range fields {
			if i > 0 {
				in.WriteByte('\t')
			}
			in.WriteString(hex.EncodeToString([]byte(f)))
		}
		in.WriteByte('\n')
	}
	cmd := exec.Command(m.java, "-cp", m.classDir, "JavaMatch")
	cmd.Stdin = &in
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "run JavaMatch: %s", stderr.String())
	res := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	require.Len(t, res, len(lines))
	return res
}
