# The .deb: `cpack -G DEB` in a build directory (after building). Contents:
#   /usr/bin/xferd, /usr/lib/systemd/system/xferd.service,
#   /etc/xferd/xferd.toml (a conffile: local edits survive upgrades),
#   /usr/share/xferd/{dashboards,prometheus,grafana,kubernetes}, /usr/share/doc/xferd/*.md,
#   /usr/libexec/xferd/xferd-slurm-health-check
# The service runs as a DynamicUser, so the package creates no user.

set(XFERD_UNIT_DIR "lib/systemd/system" CACHE STRING
    "Where the systemd unit is installed (relative to the install prefix)")
# The config lives in /etc whatever the prefix: that is where the unit looks for it.
set(XFERD_CONFIG_DIR "/etc/xferd" CACHE PATH "Where xferd.toml is installed")

install(FILES ${PROJECT_SOURCE_DIR}/deploy/systemd/xferd.service DESTINATION ${XFERD_UNIT_DIR})
install(FILES ${PROJECT_SOURCE_DIR}/deploy/xferd.toml DESTINATION ${XFERD_CONFIG_DIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/dashboards/ DESTINATION share/xferd/dashboards
        FILES_MATCHING PATTERN "*.json")
install(FILES ${PROJECT_SOURCE_DIR}/deploy/prometheus/xferd.rules.yml
              ${PROJECT_SOURCE_DIR}/deploy/prometheus/xferd.rules.test.yml
              ${PROJECT_SOURCE_DIR}/deploy/prometheus/xferd.rules.fleet.test.yml
              ${PROJECT_SOURCE_DIR}/deploy/prometheus/prometheus.yml
        DESTINATION share/xferd/prometheus)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/deploy/prometheus/targets DESTINATION share/xferd/prometheus)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/deploy/grafana/provisioning DESTINATION share/xferd/grafana)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/deploy/kubernetes/ DESTINATION share/xferd/kubernetes
        FILES_MATCHING PATTERN "*.yaml")
# slurmd's HealthCheckProgram (docs/operations.md, "Slurm").
install(PROGRAMS ${PROJECT_SOURCE_DIR}/deploy/slurm/xferd-slurm-health-check
        DESTINATION libexec/xferd)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/docs/ DESTINATION share/doc/xferd
        FILES_MATCHING PATTERN "*.md")
install(FILES ${PROJECT_SOURCE_DIR}/README.md DESTINATION share/doc/xferd OPTIONAL)

set(CPACK_GENERATOR "DEB")
set(CPACK_PACKAGE_NAME "xferd")
set(CPACK_PACKAGE_VERSION "${PROJECT_VERSION}")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "host<->GPU transfer bandwidth monitor for Prometheus")
string(CONCAT CPACK_PACKAGE_DESCRIPTION
    "xferd periodically probes host<->GPU transfer bandwidth (pageable, pinned, pinned_async,\n"
    "zero_copy, managed, managed_prefetch), records bandwidth and latency histograms and\n"
    "exports them on a Prometheus endpoint. Ships a hardened systemd unit, alert rules and\n"
    "Grafana dashboards.")
set(CPACK_PACKAGE_CONTACT "xferd maintainers <xferd@localhost>")
set(CPACK_PACKAGING_INSTALL_PREFIX "/usr")
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION "admin")
set(CPACK_DEBIAN_PACKAGE_PRIORITY "optional")
# Library dependencies are computed from the binary (dpkg-shlibdeps); the scripts need
# deb-systemd-helper, and the unit's ExecReload needs /bin/kill (procps: not in a minimal
# Debian, where `systemctl reload xferd` would fail without it). libcuda is loaded by the CUDA runtime at run time and comes with the
# NVIDIA driver, which has too many package names to depend on: without it xferd says so
# and exits 69.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_DEPENDS "init-system-helpers (>= 1.54), procps")
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "prometheus, prometheus-node-exporter")

configure_file(${PROJECT_SOURCE_DIR}/deploy/debian/conffiles.in
               ${PROJECT_BINARY_DIR}/debian/conffiles @ONLY)
foreach(script postinst prerm postrm)
  file(COPY ${PROJECT_SOURCE_DIR}/deploy/debian/${script} DESTINATION ${PROJECT_BINARY_DIR}/debian
       FILE_PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE
                        WORLD_READ WORLD_EXECUTE)
endforeach()
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
    ${PROJECT_BINARY_DIR}/debian/conffiles ${PROJECT_BINARY_DIR}/debian/postinst
    ${PROJECT_BINARY_DIR}/debian/prerm ${PROJECT_BINARY_DIR}/debian/postrm)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)

include(CPack)
