# The README's ```cpp blocks of one kind as one C++ program: each block the body of a function
# of its own, its #include lines before them (after the umbrella header), a main that calls
# every block in order, and a prelude that declares train(), the trainer's own step, which
# the blocks call. Kinds, by section: "gpu" (## On the GPU), "torch" (## libtorch), "host"
# (every other section). A kind with no block gives a program whose main does nothing, and
# prints "blocks: 0" on standard error. With -v only=N, block N of the kind alone, with the
# #include lines of its section's blocks up to it (a reader copies a section's blocks, whose
# first ones show the includes) and no umbrella header: whether those includes are enough.
#   awk -v kind=host -f extract_blocks.awk README.md > readme_host.cpp
#   awk -v kind=host -v only=3 -f extract_blocks.awk README.md > readme_host_3.cpp
BEGIN {
  if (kind != "host" && kind != "gpu" && kind != "torch") { print "kind must be host, gpu or torch" > "/dev/stderr"; exit 2 }
  umbrella["host"] = "multipack/multipack.hpp"
  umbrella["gpu"] = "multipack/multipack.hpp"
  umbrella["torch"] = "multipack/multipack.hpp"
}
/^## / { section = ($0 ~ /^## On the GPU/) ? "gpu" : ($0 ~ /^## libtorch/) ? "torch" : "host"; section_includes = "" }
/^```cpp$/ {
  in_code = 1
  mine = (section == kind)
  if (mine) {
    blocks++
    if (only != "" && blocks != only + 0) mine = 0  # counted, not written
  }
  if (mine) { emitted[blocks] = 1; body = body sprintf("static void readme_block_%d() {  // README.md line %d\n", blocks, NR + 1) }
  next
}
in_code && /^```$/ {
  if (mine) body = body "}\n"
  if (mine && only != "") includes = section_includes
  in_code = 0
  next
}
in_code && /^#include / {
  if (section == kind) section_includes = section_includes $0 "\n"
  if (mine && only == "") includes = includes $0 "\n"
  next
}
in_code && mine { body = body $0 "\n" }
END {
  if (kind == "torch") print "#include <torch/torch.h>  // first: libtorch's own includes"
  print "#include <cstddef>\n#include <cstdint>\n#include <cstdio>\n#include <ranges>\n#include <span>\n#include <vector>"
  if (only == "") printf "#include <%s>\n", umbrella[kind]
  printf "%s", includes
  print "// The trainer's own step, which the blocks call: here it takes the arrays and does nothing."
  print "template <class... Arrays> void train(Arrays&&...) {}"
  printf "%s", body
  print "int main() {"
  for (b = 1; b <= blocks; b++) if (b in emitted) printf "  readme_block_%d();\n", b
  print "}"
  printf "blocks: %d\n", blocks > "/dev/stderr"
}
