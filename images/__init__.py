"""Sandbox image recipes: a Dockerfile for registry users and an offline rootfs builder."""
