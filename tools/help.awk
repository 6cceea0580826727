#!/usr/bin/awk -f
# make help: every target the Makefile documents with a `## target: description` block, with the
# description's first clause (up to the first `;`, `: ` or `. ` outside parentheses and
# backquotes), in the Makefile's order. With `-v check=1` it prints nothing and fails naming every
# target rule (`name:` at the start of a line, not a variable) that has no such block.
function flush(   i, c, depth, quoted, out) {
  if (target == "") return
  depth = 0; quoted = 0; out = text
  for (i = 1; i <= length(text); i++) {
    c = substr(text, i, 1)
    if (c == "`") quoted = !quoted
    else if (!quoted && c == "(") depth++
    else if (!quoted && c == ")") depth--
    else if (!quoted && depth == 0 && (c == ";" || ((c == ":" || c == ".") && substr(text, i + 1, 1) == " "))) {
      out = substr(text, 1, i - 1)
      break
    }
  }
  if (!check) printf "  %-20s %s\n", target, out
  documented[target] = 1
  target = ""
}
/^## [a-z0-9-]+: / {
  flush()
  target = $2; sub(/:$/, "", target)
  text = substr($0, length($2) + 5)
  next
}
/^## / && target != "" { text = text " " substr($0, 4); next }
{ flush() }
/^[a-z0-9-]+:([^=]|$)/ { rule = $1; sub(/:.*/, "", rule); rules[++count] = rule }
END {
  flush()
  if (!check) exit 0
  for (i = 1; i <= count; i++) {
    if (!(rules[i] in documented)) { print "Makefile: target " rules[i] " has no `## " rules[i] ": ...` line" > "/dev/stderr"; failed = 1 }
  }
  exit failed
}
