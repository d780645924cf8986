# The README's ```cpp blocks of one kind as one C++ program: each block the body of a function
# of its own, its #include lines before them (after the umbrella header), a main that calls
# every block in order, and a prelude that declares train(), the trainer's own step, which
# the blocks call. Kinds, by section: "gpu" (## On the GPU), "torch" (## libtorch), "host"
# (every other section). A kind with no block gives a program whose main does nothing, and
# prints "blocks: 0" on standard error.
#   awk -v kind=host -f extract_blocks.awk README.md > readme_host.cpp
BEGIN {
  if (kind != "host" && kind != "gpu" && kind != "torch") { print "kind must be host, gpu or torch" > "/dev/stderr"; exit 2 }
  umbrella["host"] = "multipack/multipack.hpp"
  umbrella["gpu"] = "multipack/multipack.hpp"
  umbrella["torch"] = "multipack/multipack.hpp"
}
/^## / { section = ($0 ~ /^## On the GPU/) ? "gpu" : ($0 ~ /^## libtorch/) ? "torch" : "host" }
/^```cpp$/ {
  in_code = 1
  mine = (section == kind)
  if (mine) { blocks++; body = body sprintf("static void readme_block_%d() {  // README.md line %d\n", blocks, NR + 1) }
  next
}
in_code && /^```$/ { if (mine) body = body "}\n"; in_code = 0; next }
in_code && mine && /^#include / { includes = includes $0 "\n"; next }
in_code && mine { body = body $0 "\n" }
END {
  if (kind == "torch") print "#include <torch/torch.h>  // first: libtorch's own includes"
  print "#include <cstddef>\n#include <cstdint>\n#include <cstdio>\n#include <ranges>\n#include <span>\n#include <vector>"
  printf "#include <%s>\n%s", umbrella[kind], includes
  print "// The trainer's own step, which the blocks call: here it takes the arrays and does nothing."
  print "template <class... Arrays> void train(Arrays&&...) {}"
  printf "%s", body
  print "int main() {"
  for (b = 1; b <= blocks; b++) printf "  readme_block_%d();\n", b
  print "}"
  printf "blocks: %d\n", blocks > "/dev/stderr"
}
