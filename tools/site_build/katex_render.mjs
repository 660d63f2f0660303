// Render TeX to HTML at build time, so pages need KaTeX's CSS and fonts but no JavaScript.
// stdin: JSON [{"tex": "...", "display": true|false, "where": "page (optional)"}, ...];
// stdout: JSON ["<span class=katex>...", ...].
// A formula KaTeX cannot parse is an error (exit 1) naming its page, so a typo fails `mkdocs build --strict`.
import katex from "katex";

let input = "";
process.stdin.setEncoding("utf8");
for await (const chunk of process.stdin) input += chunk;
const items = JSON.parse(input);
const out = [];
for (const { tex, display, where } of items) {
  try {
    out.push(katex.renderToString(tex, { displayMode: display, throwOnError: true, output: "htmlAndMathml" }));
  } catch (err) {
    const page = where ? ` on ${where}` : "";
    process.stderr.write(`KaTeX could not render ${JSON.stringify(tex)}${page}: ${err.message}\n`);
    process.exit(1);
  }
}
process.stdout.write(JSON.stringify(out));
