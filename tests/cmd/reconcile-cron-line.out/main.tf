# Your own Terraform config: infrakit-tf never parses, changes or deletes it.
# It writes instance-*.tf.json, *_dedicated_*.tf.json and *_global.tf.json beside it.
#
# Everything here uses the built-in `terraform_data` resource, so it runs on a bare
# terraform with no provider download.

terraform {
  required_version = ">= 1.4"
}

# A stand-in for the network every machine of the group lives in.
resource "terraform_data" "network" {
  input = {
    cidr = "10.0.0.0/16"
  }
}
