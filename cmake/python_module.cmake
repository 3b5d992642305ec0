# gannet._core, the extension module of the Python package (python/gannet). Outside
# scikit-build-core the project's .venv provides the interpreter and nanobind; the module
# and a copy of the package's Python files go to <build>/python/gannet, which the tests
# put on PYTHONPATH.
if(NOT SKBUILD AND NOT DEFINED Python_EXECUTABLE AND EXISTS ${CMAKE_SOURCE_DIR}/.venv/bin/python)
  set(Python_EXECUTABLE ${CMAKE_SOURCE_DIR}/.venv/bin/python)
endif()
find_package(Python 3.9 COMPONENTS Interpreter Development.Module)
if(NOT Python_FOUND)
  message(FATAL_ERROR "Python's headers were not found (install python3-dev: scripts/setup.sh does), or "
                      "configure with -DGANNET_PYTHON=OFF to build without the Python package")
endif()
execute_process(COMMAND "${Python_EXECUTABLE}" -m nanobind --cmake_dir
                OUTPUT_VARIABLE GANNET_NANOBIND_DIR OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE nb_rc
                ERROR_QUIET)
if(NOT nb_rc EQUAL 0)
  message(FATAL_ERROR "nanobind is not installed for ${Python_EXECUTABLE} (scripts/setup.sh puts it in .venv), "
                      "or configure with -DGANNET_PYTHON=OFF to build without the Python package")
endif()
find_package(nanobind CONFIG REQUIRED PATHS ${GANNET_NANOBIND_DIR} NO_DEFAULT_PATH)

file(GLOB GANNET_PYTHON_SOURCES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/python/*.cpp)
nanobind_add_module(gannet_python NB_STATIC ${GANNET_PYTHON_SOURCES})
target_link_libraries(gannet_python PRIVATE gannet_engine gannet_chat)
set_target_properties(gannet_python PROPERTIES OUTPUT_NAME _core
                      LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/python/gannet)
# nanobind's own sources are not ours: no -Werror on them.
if(TARGET nanobind-static)
  target_compile_options(nanobind-static PRIVATE -Wno-error)
endif()

if(SKBUILD)
  install(TARGETS gannet_python LIBRARY DESTINATION gannet COMPONENT python)
else()
  file(GLOB GANNET_PYTHON_FILES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/python/gannet/*.py)
  set(copied)
  foreach(f ${GANNET_PYTHON_FILES})
    get_filename_component(name ${f} NAME)
    add_custom_command(OUTPUT ${CMAKE_BINARY_DIR}/python/gannet/${name}
                       COMMAND ${CMAKE_COMMAND} -E copy ${f} ${CMAKE_BINARY_DIR}/python/gannet/${name}
                       DEPENDS ${f} VERBATIM)
    list(APPEND copied ${CMAKE_BINARY_DIR}/python/gannet/${name})
  endforeach()
  add_custom_target(gannet_python_files ALL DEPENDS ${copied})
  add_dependencies(gannet_python gannet_python_files)
endif()
