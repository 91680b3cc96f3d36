# Installation and packaging: headers, both libraries, the CLI, a CMake package
# (find_package(ssmops) -> ssmops::ssmops, ssmops::ssmops_static) and a pkg-config file.
# Included by the top-level CMakeLists.txt.
#
# The libraries are built from the OBJECT library ssmops_objects through $<TARGET_OBJECTS>,
# i.e. as sources, not as a link dependency, so the export set needs only the two real
# library targets; ssmops_objects never appears in the exported interface.

include(CMakePackageConfigHelpers)

set(SSMOPS_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/ssmops
    CACHE STRING "Where ssmopsConfig.cmake is installed (relative to the prefix)")

# Same names inside a build tree as after find_package, so add_subdirectory(ssmops) users
# can write target_link_libraries(app ssmops::ssmops) too.
add_library(ssmops::ssmops ALIAS ssmops)
add_library(ssmops::ssmops_static ALIAS ssmops_static)

install(TARGETS ssmops ssmops_static EXPORT ssmopsTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES ${PROJECT_SOURCE_DIR}/include/ssmops.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

if(TARGET ssmops_cli)
  install(TARGETS ssmops_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()

# ---- CMake package -----------------------------------------------------------------------
install(EXPORT ssmopsTargets NAMESPACE ssmops:: FILE ssmopsTargets.cmake
        DESTINATION ${SSMOPS_CMAKE_DIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/ssmopsConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/ssmopsConfig.cmake
                              INSTALL_DESTINATION ${SSMOPS_CMAKE_DIR})
# 0.x releases may break the API between minor versions, so only the same minor matches.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/ssmopsConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/ssmopsConfig.cmake ${PROJECT_BINARY_DIR}/ssmopsConfigVersion.cmake
        DESTINATION ${SSMOPS_CMAKE_DIR})

# ---- pkg-config ----------------------------------------------------------------------------
# The prefix is written at install time, not at configure time, so that
# `cmake --install build --prefix DIR` yields a ssmops.pc that points into DIR. The file is
# staged under a name derived from the prefix, so two installs of one build tree into
# different prefixes can run at the same time (the CTest install checks do).
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  set(SSMOPS_PC_LIBDIR "${CMAKE_INSTALL_LIBDIR}")
  set(SSMOPS_PC_DEST "${CMAKE_INSTALL_LIBDIR}/pkgconfig")
else()
  set(SSMOPS_PC_LIBDIR "\${prefix}/${CMAKE_INSTALL_LIBDIR}")
  set(SSMOPS_PC_DEST "\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_LIBDIR}/pkgconfig")
endif()
if(IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
  set(SSMOPS_PC_INCLUDEDIR "${CMAKE_INSTALL_INCLUDEDIR}")
else()
  set(SSMOPS_PC_INCLUDEDIR "\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}")
endif()
set(SSMOPS_PC_VERSION "${PROJECT_VERSION}")
set(SSMOPS_PC_PREFIX "@SSMOPS_PC_PREFIX@") # left for the install-time pass below
configure_file(${PROJECT_SOURCE_DIR}/cmake/ssmops.pc.in ${PROJECT_BINARY_DIR}/ssmops.pc.in @ONLY)
install(CODE "
  set(SSMOPS_PC_PREFIX \"\${CMAKE_INSTALL_PREFIX}\")
  string(MD5 ssmops_pc_tag \"\${CMAKE_INSTALL_PREFIX}\")
  set(ssmops_pc \"${PROJECT_BINARY_DIR}/pkgconfig-staging/\${ssmops_pc_tag}/ssmops.pc\")
  configure_file(\"${PROJECT_BINARY_DIR}/ssmops.pc.in\" \"\${ssmops_pc}\" @ONLY)
  file(INSTALL DESTINATION \"${SSMOPS_PC_DEST}\" TYPE FILE FILES \"\${ssmops_pc}\")
")
