"""Settings and the config file: the settings models by seam (core, surfaces, chat platforms,
memory, remote agents), the config.yaml editor, the profile's keys file and environment lists."""
