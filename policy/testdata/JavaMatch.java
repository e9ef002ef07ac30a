// JavaMatch is the Java side of policy's differential filter test. It reads lines of tab-separated
// hex-encoded UTF-8 strings: a pattern, then the names to try. For each line it prints
// "ERR <reason>" when java.util.regex.Pattern rejects the pattern, else "OK " followed by one
// '1' (Matcher.matches() is true) or '0' per name.
import java.io.BufferedOutputStream;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.regex.Pattern;
import java.util.regex.PatternSyntaxException;

public class JavaMatch {
    private static String unhex(String h) {
        byte[] b = new byte[h.length() / 2];
        for (int i = 0; i < b.length; i++) {
            b[i] = (byte) Integer.parseInt(h.substring(2 * i, 2 * i + 2), 16);
        }
        return new String(b, StandardCharsets.UTF_8);
    }

    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        PrintStream out = new PrintStream(new BufferedOutputStream(System.out), false, "UTF-8");
        for (String line; (line = in.readLine()) != null; ) {
            String[] fields = line.split("\t", -1);
            Pattern p;
            try {
                p = Pattern.compile(unhex(fields[0]));
            } catch (PatternSyntaxException e) {
                out.println("ERR " + e.getDescription());
                continue;
            }
            StringBuilder sb = new StringBuilder("OK ");
            for (int i = 1; i < fields.length; i++) {
                sb.append(p.matcher(unhex(fields[i])).matches() ? '1' : '0');
            }
            out.println(sb);
        }
        out.flush();
    }
}
