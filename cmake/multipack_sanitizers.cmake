# MULTIPACK_SANITIZE=address,undefined or =thread: instruments everything this project builds.
set(MULTIPACK_SANITIZE "" CACHE STRING "Sanitizers to build with (address,undefined | thread)")
if(MULTIPACK_SANITIZE)
  add_compile_options(-fsanitize=${MULTIPACK_SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=all)
  add_link_options(-fsanitize=${MULTIPACK_SANITIZE})
endif()
